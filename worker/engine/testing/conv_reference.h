// Convolution and pooling by their definitions (backend.h's Conv2dGeometry
// and Pool2dGeometry), in double, loop by loop: the reference the backends'
// kernels are tested against. Tensors are flat NCHW vectors; w is
// [F][C/G][kh][kw].
#ifndef TRAIND_WORKER_ENGINE_TESTING_CONV_REFERENCE_H_
#define TRAIND_WORKER_ENGINE_TESTING_CONV_REFERENCE_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "worker/engine/backend/backend.h"

namespace traind::engine::reference {

// Calls visit(xi, wi, yi) for every product x[xi] · w[wi] that goes into
// output yi: those whose input element lies inside the image (the padding
// contributes zeros).
template <typename Visit>
void ForEachConvTerm(const Conv2dGeometry& g, Visit visit) {
  const int64_t oh = g.out_height(), ow = g.out_width();
  const int64_t cg = g.in_channels / g.groups, fg = g.out_channels / g.groups;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t f = 0; f < g.out_channels; ++f) {
      const int64_t group = f / fg;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t ch = group * cg + c;
            for (int64_t p = 0; p < g.kernel_height; ++p) {
              const int64_t h = i * g.stride_height + p * g.dilation_height - g.pad_top;
              if (h < 0 || h >= g.in_height) continue;
              for (int64_t q = 0; q < g.kernel_width; ++q) {
                const int64_t wcol = j * g.stride_width + q * g.dilation_width - g.pad_left;
                if (wcol < 0 || wcol >= g.in_width) continue;
                const int64_t xi = ((n * g.in_channels + ch) * g.in_height + h) * g.in_width + wcol;
                const int64_t wi = ((f * cg + c) * g.kernel_height + p) * g.kernel_width + q;
                const int64_t yi = ((n * g.out_channels + f) * oh + i) * ow + j;
                visit(xi, wi, yi);
              }
            }
          }
        }
      }
    }
  }
}

// z = conv(x, w) + b (b empty: no bias).
inline std::vector<double> ConvForward(const Conv2dGeometry& g, const std::vector<double>& x,
                                       const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> z(static_cast<size_t>(g.batch * g.out_size()), 0.0);
  ForEachConvTerm(g, [&](int64_t xi, int64_t wi, int64_t yi) { z[yi] += x[xi] * w[wi]; });
  if (!b.empty()) {
    const int64_t plane = g.out_height() * g.out_width();
    for (size_t i = 0; i < z.size(); ++i) {
      z[i] += b[(static_cast<int64_t>(i) / plane) % g.out_channels];
    }
  }
  return z;
}

// Gradients of Σ dz ⊙ conv(x, w) + b: dx, dw, db.
struct ConvGrads {
  std::vector<double> dx, dw, db;
};
inline ConvGrads ConvBackward(const Conv2dGeometry& g, const std::vector<double>& x,
                              const std::vector<double>& w, const std::vector<double>& dz) {
  ConvGrads out;
  out.dx.assign(x.size(), 0.0);
  out.dw.assign(w.size(), 0.0);
  out.db.assign(static_cast<size_t>(g.out_channels), 0.0);
  ForEachConvTerm(g, [&](int64_t xi, int64_t wi, int64_t yi) {
    out.dx[xi] += dz[yi] * w[wi];
    out.dw[wi] += dz[yi] * x[xi];
  });
  const int64_t plane = g.out_height() * g.out_width();
  for (size_t i = 0; i < dz.size(); ++i) {
    out.db[(static_cast<int64_t>(i) / plane) % g.out_channels] += dz[i];
  }
  return out;
}

// Calls visit(yi, xi) for every input element in output yi's window that
// lies inside the image.
template <typename Visit>
void ForEachPoolTerm(const Pool2dGeometry& g, Visit visit) {
  const int64_t oh = g.out_height(), ow = g.out_width();
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t c = 0; c < g.channels; ++c) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t yi = ((n * g.channels + c) * oh + i) * ow + j;
          for (int64_t p = 0; p < g.kernel_height; ++p) {
            const int64_t h = i * g.stride_height + p - g.pad_top;
            if (h < 0 || h >= g.in_height) continue;
            for (int64_t q = 0; q < g.kernel_width; ++q) {
              const int64_t wcol = j * g.stride_width + q - g.pad_left;
              if (wcol < 0 || wcol >= g.in_width) continue;
              visit(yi, ((n * g.channels + c) * g.in_height + h) * g.in_width + wcol);
            }
          }
        }
      }
    }
  }
}

// The divisor of output yi of an average pooling.
inline std::vector<double> PoolDivisors(const Pool2dGeometry& g, PoolKind kind) {
  std::vector<double> d(static_cast<size_t>(g.batch * g.out_size()), 0.0);
  if (kind == PoolKind::kAverage) {
    for (double& v : d) v = static_cast<double>(g.kernel_height * g.kernel_width);
  } else {
    ForEachPoolTerm(g, [&](int64_t yi, int64_t) { d[yi] += 1.0; });
  }
  return d;
}

inline std::vector<double> PoolForward(const Pool2dGeometry& g, PoolKind kind,
                                       const std::vector<double>& x) {
  const size_t n = static_cast<size_t>(g.batch * g.out_size());
  if (kind == PoolKind::kMax) {
    std::vector<double> y(n, -std::numeric_limits<double>::infinity());
    ForEachPoolTerm(g, [&](int64_t yi, int64_t xi) {
      if (x[xi] > y[yi]) y[yi] = x[xi];
    });
    return y;
  }
  std::vector<double> y(n, 0.0);
  ForEachPoolTerm(g, [&](int64_t yi, int64_t xi) { y[yi] += x[xi]; });
  const std::vector<double> d = PoolDivisors(g, kind);
  for (size_t i = 0; i < n; ++i) y[i] /= d[i];
  return y;
}

// dx of Σ dy ⊙ pool(x) (max: the gradient goes to each window's first
// maximum; ties do not occur in random inputs).
inline std::vector<double> PoolBackward(const Pool2dGeometry& g, PoolKind kind,
                                        const std::vector<double>& x,
                                        const std::vector<double>& dy) {
  std::vector<double> dx(x.size(), 0.0);
  if (kind == PoolKind::kMax) {
    std::vector<int64_t> arg(dy.size(), -1);
    ForEachPoolTerm(g, [&](int64_t yi, int64_t xi) {
      if (arg[yi] < 0 || x[xi] > x[arg[yi]]) arg[yi] = xi;
    });
    for (size_t i = 0; i < dy.size(); ++i) dx[arg[i]] += dy[i];
    return dx;
  }
  const std::vector<double> d = PoolDivisors(g, kind);
  ForEachPoolTerm(g, [&](int64_t yi, int64_t xi) { dx[xi] += dy[yi] / d[yi]; });
  return dx;
}

}  // namespace traind::engine::reference

#endif  // TRAIND_WORKER_ENGINE_TESTING_CONV_REFERENCE_H_
