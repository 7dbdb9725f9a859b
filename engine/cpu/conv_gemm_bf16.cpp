// engine/cpu/conv_gemm_bf16.cpp: the small-output convolution (conv.cpp's
// CpuConvAsGemm, 4 output pixels or fewer) and every 1x1 convolution in
// bf16 on AMX, as three oneDNN matmuls over an im2col matrix (for a 1x1
// stride-1 convolution, x itself) instead of one GEMM per live (tap, pixel)
// or oneDNN's convolution kernels.
//
// Why not per-pair products as in fp32: oneDNN 2.6 runs a bf16 matmul of one
// output pixel (rows strided by the map) in its AVX-512 gemm, no faster than
// fp32, while a whole contiguous product runs in its AMX kernels at 3-5x
// that (measured on this project's Xeon: [128, 256] x [256, 256] at 1042
// GFLOP/s against 238 in fp32). So the live taps are laid out side by side:
//   col [N * P, U * C]   row (n, o), block u: x at the input pixel tap
//                        t0 + u meets from output pixel o, zero in padding
//   y  = col w_u         [N * P, K], written straight into y (bf16, NHWC)
//   dw_u = col^T dy      [U * C, K], fp32, straight into the master's
//                        gradient (col read transposed: no copy)
//   dcol = dy w_u^T      fp32, then summed per input pixel into dx (col2im,
//                        one rounding to bf16 per element)
// where taps t0 .. t0 + U - 1 are the range that holds every live tap (all 9
// of a 3x3 at 2x2; the centre alone at 1x1) and w_u the master weight's rows
// for them: the master is [R][S][C][K] fp32, so w_u is a contiguous
// [U * C, K] block, copied to bf16 in each matmul's preferred layout when the
// weights change. A tap in the range that meets nothing has zero columns (a
// zero gradient); taps outside it keep the zero gradient set at bind. When
// col would equal x itself (one tap meeting each output pixel's own input
// pixel: a 1x1 stride-1 convolution), x and dx are used directly.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;
using tag = memory::format_tag;

class CpuConvAsGemmBf16 final : public ConvOp, public CpuOp {
 public:
  CpuConvAsGemmBf16(CpuBackend& be, const std::string& name, const ConvShape& sh, CpuTensor* x,
                    CpuTensor* dx)
      : be_(be), x_(x), dx_(dx), n_(sh.n), c_(sh.c), k_(sh.k), hw_(sh.h * sh.w),
        p_(sh.out_h() * sh.out_w()) {
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
    plan_taps(sh);
    const memory::dim np = n_ * p_, uc = u_ * c_;
    const auto bf16 = memory::data_type::bf16, f32 = memory::data_type::f32;

    const memory::desc w_md({k_, c_, sh.r, sh.s}, f32,
                            memory::dims{1, k_, sh.s * c_ * k_, c_ * k_});
    auto [w, wg] = be.declare_parameter(name + ".weight", {k_, c_, sh.r, sh.s}, w_md);
    weight = w, weight_grad = wg;
    const memory::desc y_md({n_, k_, sh.out_h(), sh.out_w()}, bf16, tag::nhwc);
    y = be.declare(name + ".y", {n_, k_, sh.out_h(), sh.out_w()}, y_md, TensorRole::activation);
    dy = be.declare(name + ".dy", y->dims, y_md, TensorRole::activation_grad);
    if (!direct_)
      col_ = be.declare(name + ".col", {np, uc}, memory::desc({np, uc}, bf16, tag::ab),
                        TensorRole::workspace);

    const memory::desc col_md({np, uc}, bf16, tag::ab), y2_md({np, k_}, bf16, tag::ab);
    fwd_pd_ = dnnl_compat::matmul(be.engine(), be.attr(), col_md, any_md({uc, k_}, bf16), y2_md);
    const memory::desc col_t({uc, np}, bf16, memory::dims{1, uc});
    bww_pd_ = dnnl_compat::matmul(be.engine(), be.attr(), col_t, y2_md,
                                  memory::desc({uc, k_}, f32, tag::ab));
    w_fwd_ = be.declare(name + ".weight_bf16", {uc, k_}, fwd_pd_.weights_desc(),
                        TensorRole::workspace);
    w_fwd_copy_.make(be.engine(), memory::desc({uc, k_}, f32, tag::ab), fwd_pd_.weights_desc(),
                     true);
    if (dx) {
      // direct: dx (bf16) is the product's output; else dcol, fp32
      const memory::desc dcol_md({np, uc}, direct_ ? bf16 : f32, tag::ab);
      bwd_pd_ = dnnl_compat::matmul(be.engine(), be.attr(), y2_md, any_md({k_, uc}, bf16),
                                    dcol_md);
      w_bwd_ = be.declare(name + ".weight_bf16_t", {k_, uc}, bwd_pd_.weights_desc(),
                          TensorRole::workspace);
      w_bwd_copy_.make(be.engine(), memory::desc({k_, uc}, f32, memory::dims{1, k_}),
                       bwd_pd_.weights_desc(), true);
      if (!direct_)
        dcol_ = be.declare(name + ".dcol", {np, uc}, dcol_md, TensorRole::workspace);
      be.need_scratchpad(bwd_pd_.scratchpad_desc());
    }
    be.need_scratchpad(fwd_pd_.scratchpad_desc());
    be.need_scratchpad(bww_pd_.scratchpad_desc());
    fwd_ = matmul(fwd_pd_);
    bww_ = matmul(bww_pd_);
    if (dx) bwd_ = matmul(bwd_pd_);
    be.note_kernel("conv fwd", std::string("matmul ") + fwd_pd_.impl_info_str());
    be.note_kernel("conv bwd_weights", std::string("matmul ") + bww_pd_.impl_info_str());
    if (dx) be.note_kernel("conv bwd_data", std::string("matmul ") + bwd_pd_.impl_info_str());
    be.register_op(this);
  }

  void bind() override {
    const engine& eng = be_.engine();
    const memory& sp = be_.scratchpad();
    const auto bf16 = memory::data_type::bf16, f32 = memory::data_type::f32;
    const memory::dim np = n_ * p_, uc = u_ * c_;
    void* col = direct_ ? x_->data : col_->data;
    float* w_range = static_cast<float*>(weight->data) + t0_ * c_ * k_;
    float* dw_range = static_cast<float*>(weight_grad->data) + t0_ * c_ * k_;
    std::memset(weight_grad->data, 0, weight_grad->bytes);  // taps outside the range
    const memory y2(memory::desc({np, k_}, bf16, tag::ab), eng, y->data);
    const memory dy2(memory::desc({np, k_}, bf16, tag::ab), eng, dy->data);
    fwd_args_ = {{DNNL_ARG_SRC, memory(memory::desc({np, uc}, bf16, tag::ab), eng, col)},
                 {DNNL_ARG_WEIGHTS, w_fwd_->mem},
                 {DNNL_ARG_DST, y2},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    bww_args_ = {{DNNL_ARG_SRC, memory(memory::desc({uc, np}, bf16, memory::dims{1, uc}), eng, col)},
                 {DNNL_ARG_WEIGHTS, dy2},
                 {DNNL_ARG_DST, memory(memory::desc({uc, k_}, f32, tag::ab), eng, dw_range)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    w_fwd_copy_.bind(memory(memory::desc({uc, k_}, f32, tag::ab), eng, w_range), w_fwd_->mem);
    if (dx_) {
      void* dcol = direct_ ? dx_->data : dcol_->data;
      bwd_args_ = {{DNNL_ARG_SRC, dy2},
                   {DNNL_ARG_WEIGHTS, w_bwd_->mem},
                   {DNNL_ARG_DST, memory(bwd_pd_.dst_desc(), eng, dcol)},
                   {DNNL_ARG_SCRATCHPAD, sp}};
      w_bwd_copy_.bind(memory(memory::desc({k_, uc}, f32, memory::dims{1, k_}), eng, w_range),
                       w_bwd_->mem);
    }
  }

  void forward() override {
    refresh_weights();
    if (!direct_) im2col();
    fwd_.execute(be_.stream(), fwd_args_);
  }
  void backward_data() override {
    if (!dx_) return;
    refresh_weights();
    bwd_.execute(be_.stream(), bwd_args_);
    if (!direct_) col2im();
  }
  void backward_weights() override {  // col (or x) still holds the forward's values
    bww_.execute(be_.stream(), bww_args_);
  }

 private:
  // The tap range and, per output pixel and tap in it, the input pixel met
  // (-1: padding); per input pixel, the (output pixel, tap) pairs meeting it.
  void plan_taps(const ConvShape& sh) {
    const int64_t ow = sh.out_w(), taps = sh.r * sh.s;
    auto input_pixel = [&](int64_t t, int64_t o) -> int64_t {
      const int64_t i = (o / ow) * sh.stride + t / sh.s - sh.pad;
      const int64_t j = (o % ow) * sh.stride + t % sh.s - sh.pad;
      return i >= 0 && i < sh.h && j >= 0 && j < sh.w ? i * sh.w + j : -1;
    };
    int64_t first = taps, last = -1;
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t o = 0; o < p_; ++o)
        if (input_pixel(t, o) >= 0) first = std::min(first, t), last = std::max(last, t);
    if (last < 0) throw std::logic_error("conv as GEMM: no tap meets the input");
    t0_ = first;
    u_ = last - first + 1;
    source_.assign(p_ * u_, -1);
    meets_.assign(hw_, {});
    for (int64_t o = 0; o < p_; ++o)
      for (int64_t u = 0; u < u_; ++u) {
        const int64_t i = input_pixel(t0_ + u, o);
        source_[o * u_ + u] = i;
        if (i >= 0) meets_[i].push_back(o * u_ + u);
      }
    direct_ = u_ == 1 && hw_ == p_;
    for (int64_t o = 0; direct_ && o < p_; ++o) direct_ = source_[o] == o;
    for (int64_t o = 0; o < p_; ++o) {
      bool met = false;
      for (int64_t u = 0; u < u_; ++u) met = met || source_[o * u_ + u] >= 0;
      if (!met) throw std::logic_error("conv as GEMM: an output pixel that no tap meets");
    }
  }

  void refresh_weights() {
    if (w_version_ == be_.weights_version()) return;
    w_fwd_copy_.run(be_.stream());
    w_bwd_copy_.run(be_.stream());
    w_version_ = be_.weights_version();
  }

  void im2col() {
    const auto* x = static_cast<const bf16_t*>(x_->data);
    auto* col = static_cast<bf16_t*>(col_->data);
    const int64_t rows = n_ * p_, row_len = u_ * c_;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / p_, o = r % p_;
      bf16_t* dst = col + r * row_len;
      for (int64_t u = 0; u < u_; ++u) {
        const int64_t i = source_[o * u_ + u];
        if (i < 0)
          std::memset(dst + u * c_, 0, c_ * sizeof(bf16_t));
        else
          std::memcpy(dst + u * c_, x + (n * hw_ + i) * c_, c_ * sizeof(bf16_t));
      }
    }
  }

  // dx at each input pixel: the sum in fp32 of the dcol blocks that read it,
  // rounded once; zero where no tap meets the pixel.
  void col2im() {
    const auto* dcol = static_cast<const float*>(dcol_->data);
    auto* dx = static_cast<bf16_t*>(dx_->data);
    const int64_t row_len = u_ * c_;
#pragma omp parallel
    {
      std::vector<float> acc(c_);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < n_ * hw_; ++r) {
        const int64_t n = r / hw_, i = r % hw_;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t ou : meets_[i]) {
          const float* src = dcol + (n * p_ + ou / u_) * row_len + (ou % u_) * c_;
          for (int64_t ch = 0; ch < c_; ++ch) acc[ch] += src[ch];
        }
        bf16_t* dst = dx + r * c_;
        for (int64_t ch = 0; ch < c_; ++ch) dst[ch] = float_to_bf16(acc[ch]);
      }
    }
  }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  int64_t n_, c_, k_, hw_, p_;
  int64_t t0_ = 0, u_ = 1;
  bool direct_ = false;
  std::vector<int64_t> source_;             // [P][U]: input pixel or -1
  std::vector<std::vector<int64_t>> meets_;  // [HW]: o * U + u reading it
  CpuTensor *col_ = nullptr, *dcol_ = nullptr, *w_fwd_ = nullptr, *w_bwd_ = nullptr;
  matmul::primitive_desc fwd_pd_, bww_pd_, bwd_pd_;
  matmul fwd_, bww_, bwd_;
  Reorder w_fwd_copy_, w_bwd_copy_;
  uint64_t w_version_ = 0;
  Args fwd_args_, bww_args_, bwd_args_;
};

}  // namespace

bool is_gemm_conv_bf16_input(const CpuTensor* x) {
  return x->md == memory::desc(dnnl_compat::dims_of(x->md), memory::data_type::bf16, tag::nhwc);
}

std::unique_ptr<ConvOp> make_conv_gemm_bf16(CpuBackend& be, const std::string& name,
                                            const ConvShape& shape, CpuTensor* x, CpuTensor* dx) {
  return std::make_unique<CpuConvAsGemmBf16>(be, name, shape, x, dx);
}

}  // namespace xrun::cpu
