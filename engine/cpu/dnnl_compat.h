// engine/cpu/dnnl_compat.h: the one place the CPU backend meets oneDNN's two
// APIs: 2.x (Debian 12: 2.7), where a primitive descriptor is made from an
// op descriptor (convolution_forward::desc) and a memory descriptor's layout
// is read from its C struct (md.data), and 3.x (Debian 13: 3.7), where the
// primitive descriptor takes the op's arguments directly and the layout is
// read through queries (md.get_strides()). The CPU backend calls only what
// is here; what a run means is the same on both.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>

namespace xrun::cpu::dnnl_compat {

using dnnl::algorithm;
using dnnl::engine;
using dnnl::memory;
using dnnl::primitive_attr;
using dnnl::prop_kind;

// ---- primitive descriptors (no bias, no dilation, symmetric padding) ----

inline dnnl::convolution_forward::primitive_desc conv_forward(
    const engine& eng, const primitive_attr& attr, prop_kind prop, const memory::desc& src,
    const memory::desc& weights, const memory::desc& dst, const memory::dims& strides,
    const memory::dims& pad) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, algorithm::convolution_direct, src, weights, dst, strides, pad, pad, attr};
#else
  return {{prop, algorithm::convolution_direct, src, weights, dst, strides, pad, pad}, attr, eng};
#endif
}

inline dnnl::convolution_backward_data::primitive_desc conv_backward_data(
    const engine& eng, const primitive_attr& attr, const memory::desc& diff_src,
    const memory::desc& weights, const memory::desc& diff_dst, const memory::dims& strides,
    const memory::dims& pad, const dnnl::convolution_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, algorithm::convolution_direct, diff_src, weights, diff_dst, strides, pad, pad,
          hint, attr};
#else
  return {{algorithm::convolution_direct, diff_src, weights, diff_dst, strides, pad, pad}, attr,
          eng, hint};
#endif
}

inline dnnl::convolution_backward_weights::primitive_desc conv_backward_weights(
    const engine& eng, const primitive_attr& attr, const memory::desc& src,
    const memory::desc& diff_weights, const memory::desc& diff_dst, const memory::dims& strides,
    const memory::dims& pad, const dnnl::convolution_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, algorithm::convolution_direct, src, diff_weights, diff_dst, strides, pad, pad,
          hint, attr};
#else
  return {{algorithm::convolution_direct, src, diff_weights, diff_dst, strides, pad, pad}, attr,
          eng, hint};
#endif
}

inline dnnl::inner_product_forward::primitive_desc inner_product_forward(
    const engine& eng, const primitive_attr& attr, prop_kind prop, const memory::desc& src,
    const memory::desc& weights, const memory::desc& bias, const memory::desc& dst) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, src, weights, bias, dst, attr};
#else
  return {{prop, src, weights, bias, dst}, attr, eng};
#endif
}

inline dnnl::inner_product_backward_data::primitive_desc inner_product_backward_data(
    const engine& eng, const primitive_attr& attr, const memory::desc& diff_src,
    const memory::desc& weights, const memory::desc& diff_dst,
    const dnnl::inner_product_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, diff_src, weights, diff_dst, hint, attr};
#else
  return {{diff_src, weights, diff_dst}, attr, eng, hint};
#endif
}

inline dnnl::inner_product_backward_weights::primitive_desc inner_product_backward_weights(
    const engine& eng, const primitive_attr& attr, const memory::desc& src,
    const memory::desc& diff_weights, const memory::desc& diff_bias, const memory::desc& diff_dst,
    const dnnl::inner_product_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, src, diff_weights, diff_bias, diff_dst, hint, attr};
#else
  return {{src, diff_weights, diff_bias, diff_dst}, attr, eng, hint};
#endif
}

inline dnnl::matmul::primitive_desc matmul(const engine& eng, const primitive_attr& attr,
                                           const memory::desc& src, const memory::desc& weights,
                                           const memory::desc& dst) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, src, weights, dst, attr};
#else
  return {{src, weights, dst}, attr, eng};
#endif
}

// The same with a bias [1, O] added to every row.
inline dnnl::matmul::primitive_desc matmul(const engine& eng, const primitive_attr& attr,
                                           const memory::desc& src, const memory::desc& weights,
                                           const memory::desc& bias, const memory::desc& dst) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, src, weights, bias, dst, attr};
#else
  return {{src, weights, bias, dst}, attr, eng};
#endif
}

inline dnnl::pooling_forward::primitive_desc pooling_forward(
    const engine& eng, const primitive_attr& attr, prop_kind prop, algorithm alg,
    const memory::desc& src, const memory::desc& dst, const memory::dims& strides,
    const memory::dims& kernel, const memory::dims& pad) {
#if DNNL_VERSION_MAJOR >= 3
  const memory::dims no_dilation(kernel.size(), 0);
  return {eng, prop, alg, src, dst, strides, kernel, no_dilation, pad, pad, attr};
#else
  return {{prop, alg, src, dst, strides, kernel, pad, pad}, attr, eng};
#endif
}

inline dnnl::pooling_backward::primitive_desc pooling_backward(
    const engine& eng, const primitive_attr& attr, algorithm alg, const memory::desc& diff_src,
    const memory::desc& diff_dst, const memory::dims& strides, const memory::dims& kernel,
    const memory::dims& pad, const dnnl::pooling_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  const memory::dims no_dilation(kernel.size(), 0);
  return {eng, alg, diff_src, diff_dst, strides, kernel, no_dilation, pad, pad, hint, attr};
#else
  return {{alg, diff_src, diff_dst, strides, kernel, pad, pad}, attr, eng, hint};
#endif
}

// ---- a memory descriptor's layout ----

// A plain or blocked (format_kind blocked) layout as the CPU backend reads
// it: logical and padded dims, the outer strides (in elements), the inner
// blocks (nChw16c: one block of 16 over dim 1) and the offset of element 0.
struct Layout {
  bool blocked = false;  // format_kind is blocked (false: any, or another kind)
  int ndims = 0;
  memory::dims dims, padded_dims, strides, inner_blks, inner_idxs;
  int64_t offset0 = 0;
  int inner_nblks() const { return static_cast<int>(inner_blks.size()); }
};

inline Layout layout_of(const memory::desc& md) {
  Layout l;
#if DNNL_VERSION_MAJOR >= 3
  l.ndims = md.get_ndims();
  l.blocked = md.get_format_kind() == memory::format_kind::blocked;
  l.dims = md.get_dims();
  l.padded_dims = md.get_padded_dims();
  l.offset0 = static_cast<int64_t>(md.get_submemory_offset());
  if (l.blocked) {
    l.strides = md.get_strides();
    l.inner_blks = md.get_inner_blks();
    l.inner_idxs = md.get_inner_idxs();
  }
#else
  const dnnl_memory_desc_t& d = md.data;
  l.ndims = d.ndims;
  l.blocked = d.format_kind == dnnl_blocked;
  l.dims.assign(d.dims, d.dims + d.ndims);
  l.padded_dims.assign(d.padded_dims, d.padded_dims + d.ndims);
  l.offset0 = d.offset0;
  if (l.blocked) {
    const auto& bk = d.format_desc.blocking;
    l.strides.assign(bk.strides, bk.strides + d.ndims);
    l.inner_blks.assign(bk.inner_blks, bk.inner_blks + bk.inner_nblks);
    l.inner_idxs.assign(bk.inner_idxs, bk.inner_idxs + bk.inner_nblks);
  }
#endif
  return l;
}

inline memory::dims dims_of(const memory::desc& md) {
#if DNNL_VERSION_MAJOR >= 3
  return md.get_dims();
#else
  return md.dims();
#endif
}

inline memory::data_type data_type_of(const memory::desc& md) {
#if DNNL_VERSION_MAJOR >= 3
  return md.get_data_type();
#else
  return md.data_type();
#endif
}

// ---- CPU ISA names (dnnl_get_effective_cpu_isa) ----

inline const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
#if DNNL_VERSION_MAJOR >= 3
    case dnnl_cpu_isa_default: return "all";
    case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
#else
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
#endif
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return nullptr;
  }
}

}  // namespace xrun::cpu::dnnl_compat
