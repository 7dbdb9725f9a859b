// core/phase.h: the phases of a training step and of a run, in pipeline
// order, with the names the store keeps.
//   graph: a replayed CUDA graph (forward, backward and optimizer in one).
//   sync:  the wait for the GPU at a step's end, where the next batch's copy
//          is issued before it (CUDA, overlapped input); elsewhere that wait
//          ends the optimizer (or graph) phase.
//   allreduce: data-parallel ranks (train.ranks > 1) summing their
//          gradients; the part of it not hidden behind the backward pass.
//   eval, checkpoint: at epoch ends, outside the steps.
#pragma once

#include <string_view>

namespace xrun {

enum class Phase {
  data_wait, h2d, forward, backward, allreduce, optimizer, sync, graph, eval, checkpoint, count
};

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data_wait: return "data_wait";
    case Phase::h2d: return "h2d";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::allreduce: return "allreduce";
    case Phase::optimizer: return "optimizer";
    case Phase::sync: return "sync";
    case Phase::graph: return "graph";
    case Phase::eval: return "eval";
    case Phase::checkpoint: return "checkpoint";
    case Phase::count: break;
  }
  return "?";
}

// Phases that happen inside a training step (eval and checkpoint do not).
inline bool is_step_phase(Phase p) { return p != Phase::eval && p != Phase::checkpoint; }

// The same by the name the store keeps ("eval" and "checkpoint" are not).
inline bool is_step_phase_name(std::string_view name) {
  return name != phase_name(Phase::eval) && name != phase_name(Phase::checkpoint);
}

}  // namespace xrun
