#include "kernels/attention.h"

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/internal.h"
#include "kernels/isa.h"
#include "kernels/tuning.h"

namespace octodiff::kernels::test {
namespace {

struct AttnCase {
  int64_t batch, q_len, kv_len, heads, head_dim;
  bool causal;
  int64_t pad;  // extra floats per row (row strides larger than heads × d) and per batch
};

std::vector<double> ref_attention(const AttnCase& t, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const AttentionShape& s, float scale) {
  const int64_t d = t.head_dim;
  std::vector<double> out(static_cast<size_t>(t.batch * t.q_len * t.heads * d));
  std::vector<double> p(static_cast<size_t>(t.kv_len));
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t i = 0; i < t.q_len; ++i) {
        double mx = -INFINITY;
        const int64_t visible = t.causal ? std::min(t.kv_len, i + 1) : t.kv_len;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += static_cast<double>(q[b * s.batch_stride_q + i * s.ldq + h * d + c]) *
                   k[b * s.batch_stride_k + j * s.ldk + h * d + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j < visible; ++j) o += p[j] * v[b * s.batch_stride_v + j * s.ldv + h * d + c];
          out[((b * t.q_len + i) * t.heads + h) * d + c] = o / sum;
        }
      }
  return out;
}

AttentionShape make_shape(const AttnCase& t) {
  AttentionShape s;
  s.batch = t.batch;
  s.q_len = t.q_len;
  s.kv_len = t.kv_len;
  s.heads = t.heads;
  s.head_dim = t.head_dim;
  const int64_t w = t.heads * t.head_dim;
  s.ldq = w + t.pad;
  s.ldk = w + 2 * t.pad;
  s.ldv = w + 3 * t.pad;
  s.ldo = w + t.pad;
  s.batch_stride_q = t.q_len * s.ldq + t.pad;
  s.batch_stride_k = t.kv_len * s.ldk + 5 * t.pad;
  s.batch_stride_v = t.kv_len * s.ldv;
  s.batch_stride_o = t.q_len * s.ldo + 2 * t.pad;
  return s;
}

// float32 attention of random q, k, v (seeds seed … seed + 2) against the double reference: the
// relative error.
double error_against_reference(const AttnCase& t, uint32_t seed) {
  const AttentionShape s = make_shape(t);
  // Scores of a few units: the softmax is far from uniform and the running max moves.
  auto q = random_vec(t.batch * s.batch_stride_q, seed, -2.0f, 2.0f);
  auto k = random_vec(t.batch * s.batch_stride_k, seed + 1, -2.0f, 2.0f);
  auto v = random_vec(t.batch * s.batch_stride_v, seed + 2);
  std::vector<float> out(t.batch * s.batch_stride_o, NAN);
  const float scale = 1.0f / std::sqrt(static_cast<float>(t.head_dim));
  attention(q.data(), k.data(), v.data(), out.data(), s, scale, t.causal);
  const auto ref = ref_attention(t, q, k, v, s, scale);
  std::vector<float> got(ref.size());
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t i = 0; i < t.q_len; ++i)
      for (int64_t c = 0; c < t.heads * t.head_dim; ++c)
        got[(b * t.q_len + i) * t.heads * t.head_dim + c] = out[b * s.batch_stride_o + i * s.ldo + c];
  return rel_error(got.data(), ref);
}

const AttnCase kCases[] = {
    {1, 5, 3, 1, 4, false, 0},     {2, 33, 77, 2, 8, false, 3},   {1, 77, 77, 3, 64, true, 0},
    {2, 77, 77, 2, 8, true, 1},    {1, 100, 77, 2, 40, false, 0}, {1, 70, 300, 2, 80, false, 2},
    {1, 64, 600, 1, 160, false, 0}, {2, 300, 300, 1, 40, true, 1}, {1, 1, 1, 1, 4, false, 0},
    {1, 29, 513, 2, 40, false, 0},
    {2, 37, 2048, 12, 64, false, 0},  // 1 MiB of packed K/V per (batch, head): groups of 8 of 24
};

TEST(Attention, MatchesDoubleReferenceOnEveryIsa) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const AttnCase& t : kCases) {
      const double err = error_against_reference(t, 31);
      EXPECT_LT(err, 1e-5) << isa_name(isa) << " Lq=" << t.q_len << " Lk=" << t.kv_len << " d=" << t.head_dim;
      std::printf("[attention %s] B=%lld Lq=%lld Lk=%lld H=%lld d=%lld causal=%d rel err %.3g\n",
                  isa_name(isa).c_str(), (long long)t.batch, (long long)t.q_len, (long long)t.kv_len,
                  (long long)t.heads, (long long)t.head_dim, t.causal, err);
    }
  }
}

// Scores in columns (AVX-512, head dims over 32 and not a multiple of 16, 256 keys or more) and in rows give
// the reference's result either way; attention_columns = 0 keeps every shape on rows.
TEST(Attention, ScoreColumnsAndRowsBothMatchTheReference) {
  const bool has_columns = detail::vec_math(kernel_isa()).softmax_columns != nullptr;
  const AttnCase cases[] = {{1, 70, 300, 2, 56, false, 2}, {1, 70, 300, 2, 80, false, 2},
                            {2, 300, 300, 1, 40, true, 1}, {1, 29, 513, 2, 41, false, 0},
                            {1, 100, 77, 2, 40, false, 0}, {1, 64, 600, 1, 64, false, 0},
                            {1, 40, 300, 2, 8, false, 0}};
  for (int64_t columns : {0, 1}) {
    KernelTuning tuning = kernel_tuning();
    tuning.attention_columns = columns;
    ScopedKernelTuning scope(tuning);
    for (const AttnCase& t : cases) {
      const AttentionShape s = make_shape(t);
      const bool eligible = t.head_dim > 32 && t.head_dim % 16 != 0 && t.kv_len >= 256;
      EXPECT_EQ(detail::attention_by_columns_chosen(s), columns == 1 && has_columns && eligible)
          << "d=" << t.head_dim << " Lk=" << t.kv_len;
      const double err = error_against_reference(t, 37);
      EXPECT_LT(err, 1e-5) << "columns=" << columns << " d=" << t.head_dim << " Lk=" << t.kv_len;
      std::printf("[attention, scores in %s] Lq=%lld Lk=%lld d=%lld causal=%d rel err %.3g\n",
                  detail::attention_by_columns_chosen(s) ? "columns" : "rows", (long long)t.q_len,
                  (long long)t.kv_len, (long long)t.head_dim, t.causal, err);
    }
  }
}

TEST(Attention, BitIdenticalForAnyThreadCount) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    const AttnCase t{2, 150, 290, 3, 40, false, 0};
    const AttentionShape s = make_shape(t);
    auto q = random_vec(t.batch * s.batch_stride_q, 34, -2.0f, 2.0f);
    auto k = random_vec(t.batch * s.batch_stride_k, 35, -2.0f, 2.0f);
    auto v = random_vec(t.batch * s.batch_stride_v, 36);
    for (bool causal : {false, true})
      expect_thread_invariant("attention " + isa_name(isa), [&] {
        std::vector<float> out(t.batch * s.batch_stride_o);
        attention(q.data(), k.data(), v.data(), out.data(), s, 0.3f, causal);
        return out;
      });
  }
}

TEST(Attention, RejectsBadShapes) {
  AttentionShape s;
  s.q_len = 4;
  s.kv_len = 0;
  s.head_dim = 8;
  float x = 0;
  EXPECT_THROW(attention(&x, &x, &x, &x, s, 1.0f, false), Error);
}

}  // namespace
}  // namespace octodiff::kernels::test
