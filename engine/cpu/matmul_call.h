// engine/cpu/matmul_call.h: one oneDNN matmul primitive made once (with the
// backend's shared scratchpad) and the memories it runs on, bound after
// allocation to raw pointers, so an operand may be a strided view into
// another tensor (a transpose, one head's columns of a fused projection).
// Used by GPT-2's linear layers (matmul.cpp) and attention (attention.cpp).
#pragma once

#include <string>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

struct MatmulCall {
  dnnl::matmul prim;
  memory::desc src, weights, dst, bias;
  Args args;
  // `pass` names the kernel in the run's environment ("matmul fwd").
  void make(CpuBackend& be, const std::string& pass, const memory::desc& a,
            const memory::desc& b, const memory::desc& c, const memory::desc* bias_md = nullptr) {
    src = a, weights = b, dst = c;
    const auto pd = bias_md ? dnnl_compat::matmul(be.engine(), be.attr(), a, b, *bias_md, c)
                            : dnnl_compat::matmul(be.engine(), be.attr(), a, b, c);
    if (bias_md) bias = *bias_md;
    prim = dnnl::matmul(pd);
    be.need_scratchpad(pd.scratchpad_desc());
    be.note_kernel(pass, pd.impl_info_str());
  }
  void bind(CpuBackend& be, const void* a, const void* b, void* c, const void* bias_data = nullptr) {
    const auto mem = [&](const memory::desc& md, const void* p) {
      return memory(md, be.engine(), const_cast<void*>(p));
    };
    args = {{DNNL_ARG_SRC, mem(src, a)},
            {DNNL_ARG_WEIGHTS, mem(weights, b)},
            {DNNL_ARG_DST, mem(dst, c)},
            {DNNL_ARG_SCRATCHPAD, be.scratchpad()}};
    if (bias_data) args[DNNL_ARG_BIAS] = mem(bias, bias_data);
  }
  void run(CpuBackend& be) { prim.execute(be.stream(), args); }
};

}  // namespace xrun::cpu
