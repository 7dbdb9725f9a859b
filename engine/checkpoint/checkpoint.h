// engine/checkpoint/checkpoint.h: a model's weights and training state in
// safetensors files. `path` holds torchvision's state_dict (parameters, BN
// running statistics, num_batches_tracked; canonical layouts, F32/I64), so
// torchvision.models.resnet50(num_classes=N).load_state_dict(
// safetensors.torch.load_file(path)) works unchanged; a GPT-2's holds
// transformers' GPT2LMHeadModel state_dict without the tied lm_head.weight
// (as save_pretrained writes it; from_pretrained ties it again). The
// optimizer state and step go to a companion file (optimizer_state_path(path)).
#pragma once

#include <cstdint>
#include <string>

#include "engine/backend.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/model.h"

namespace xrun {

struct CheckpointState {
  int64_t step = 0;             // training steps done
  int64_t optimizer_steps = 0;  // of those, applied (fp16 skips overflowing steps)
  double loss_scale = 1;        // fp16: the dynamic loss scale and its growth count
  int64_t scaler_growth_tracker = 0;
  std::string arch;
  // The configuration hash of the run that wrote it (metadata
  // "xrun.config_hash"); "" where none was given (and in files of older xrun).
  std::string config_hash;
};

// The configuration hash a checkpoint's weights file names, "" when none.
// Throws CheckpointError when the file cannot be read.
std::string checkpoint_config_hash(const std::string& path);

// "run.safetensors" -> "run.optim.safetensors".
std::string optimizer_state_path(const std::string& checkpoint_path);

// Whether `path` is a file xrun wrote as a checkpoint (or its optimizer
// companion): a valid safetensors file with xrun's metadata. False for a
// missing, foreign or malformed file; never throws.
bool is_xrun_checkpoint(const std::string& path);

// Why `path` is not a checkpoint xrun can resume from or overwrite, as the
// end of a sentence that starts with the path ("is truncated: expected 4096
// bytes, found 1000 (...)", "is not an xrun checkpoint"); "" when it is one.
std::string checkpoint_file_problem(const std::string& path);

// Writes both files (each atomically; the step is recorded in both).
void save_checkpoint(const std::string& path, const Model& model, Backend& backend,
                     OptimizerOp& optimizer, const CheckpointState& state);

// Restores weights, BN statistics, optimizer state and step. Throws
// CheckpointError when a file is missing or the two files disagree.
CheckpointState load_checkpoint(const std::string& path, Model& model, Backend& backend,
                                OptimizerOp& optimizer);

// Loads a state_dict (e.g. a torchvision model saved from PyTorch with
// safetensors): every tensor the model has, no other, with matching shapes;
// otherwise a CheckpointError naming the missing, unexpected and mis-shaped
// tensors. A weight the model ties (Model::tied_weights) may be there too
// when it holds its twin's values.
void load_weights(const std::string& path, Model& model, Backend& backend);

}  // namespace xrun
