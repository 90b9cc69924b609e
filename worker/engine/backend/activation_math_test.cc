// The activations of activation_math.h on the host: each f against a
// formula written out by hand in double, each f' against that formula's
// derivative and against central finite differences of f.
#include "worker/engine/backend/activation_math.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using activation_math::Activate;
using activation_math::Derivative;

constexpr float kAlpha = 0.2f;

struct Case {
  DenseActivation kind;
  const char* name;
  double (*f)(double z);   // by hand, alpha = kAlpha
  double (*df)(double z);  // by hand
};

double Phi(double z) { return 0.5 * (1 + std::erf(z / std::sqrt(2.0))); }
double phi(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }
double Sig(double z) { return 1 / (1 + std::exp(-z)); }

const Case kCases[] = {
    {DenseActivation::kLinear, "linear", [](double z) { return z; }, [](double) { return 1.0; }},
    {DenseActivation::kRelu, "relu", [](double z) { return z > 0 ? z : 0.0; },
     [](double z) { return z > 0 ? 1.0 : 0.0; }},
    {DenseActivation::kLeakyRelu, "leaky_relu", [](double z) { return z > 0 ? z : kAlpha * z; },
     [](double z) { return z > 0 ? 1.0 : static_cast<double>(kAlpha); }},
    {DenseActivation::kElu, "elu", [](double z) { return z > 0 ? z : kAlpha * (std::exp(z) - 1); },
     [](double z) { return z > 0 ? 1.0 : kAlpha * std::exp(z); }},
    {DenseActivation::kGelu, "gelu", [](double z) { return z * Phi(z); },
     [](double z) { return Phi(z) + z * phi(z); }},
    {DenseActivation::kSigmoid, "sigmoid", [](double z) { return Sig(z); },
     [](double z) { return Sig(z) * (1 - Sig(z)); }},
    {DenseActivation::kTanh, "tanh", [](double z) { return std::tanh(z); },
     [](double z) { return 1 - std::tanh(z) * std::tanh(z); }},
    {DenseActivation::kSoftplus, "softplus", [](double z) { return std::log1p(std::exp(z)); },
     [](double z) { return Sig(z); }},
    {DenseActivation::kSwish, "swish", [](double z) { return z * Sig(z); },
     [](double z) { return Sig(z) + z * Sig(z) * (1 - Sig(z)); }},
};

// Away from the kinks of relu, leaky relu and elu at 0.
constexpr float kPoints[] = {-4.0f, -2.5f, -1.0f, -0.6f, -0.15f, 0.15f, 0.5f, 1.0f, 2.0f, 3.5f};

float F(const Case& c, float z) { return Activate(c.kind, kAlpha, z); }
float Df(const Case& c, float z) { return Derivative(c.kind, kAlpha, z, F(c, z)); }

TEST(ActivationMath, EachActivationMatchesItsFormula) {
  for (const Case& c : kCases) {
    for (float z : kPoints) {
      const double want = c.f(z);
      EXPECT_NEAR(F(c, z), want, 2e-6 * std::max(1.0, std::abs(want))) << c.name << " z=" << z;
    }
  }
}

TEST(ActivationMath, EachDerivativeMatchesItsFormula) {
  for (const Case& c : kCases) {
    for (float z : kPoints) {
      const double want = c.df(z);
      EXPECT_NEAR(Df(c, z), want, 4e-6 * std::max(1.0, std::abs(want))) << c.name << " z=" << z;
    }
  }
}

TEST(ActivationMath, EachDerivativeMatchesCentralDifferences) {
  for (const Case& c : kCases) {
    for (float z : kPoints) {
      // In double around the float point, of the float function: the step
      // is large against float rounding (1e-7) and small against curvature.
      const float h = 1e-2f;
      const double fd = (static_cast<double>(F(c, z + h)) - F(c, z - h)) / (2.0 * h);
      EXPECT_NEAR(Df(c, z), fd, 5e-4 * std::max(1.0, std::abs(fd))) << c.name << " z=" << z;
    }
  }
}

TEST(ActivationMath, DerivativesFromTheOutputReadOnlyTheOutput) {
  // The dense kernels pass z = 0 with the real y (CPU and CUDA alike).
  for (const Case& c : kCases) {
    if (!DerivativeFromOutput(c.kind)) continue;
    for (float z : kPoints) {
      EXPECT_EQ(Derivative(c.kind, kAlpha, 0.0f, F(c, z)), Df(c, z)) << c.name << " z=" << z;
    }
  }
  EXPECT_FALSE(DerivativeFromOutput(DenseActivation::kGelu));
  EXPECT_FALSE(DerivativeFromOutput(DenseActivation::kSoftplus));
  EXPECT_FALSE(DerivativeFromOutput(DenseActivation::kSwish));
}

TEST(ActivationMath, HandDerivedValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Activate(DenseActivation::kRelu, 0, -1.0f), 0.0f);
  EXPECT_EQ(Activate(DenseActivation::kRelu, 0, 2.0f), 2.0f);
  EXPECT_EQ(Derivative(DenseActivation::kRelu, 0, 0, 0.0f), 0.0f);  // at the kink: 0
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kLeakyRelu, kAlpha, -2.0f), -0.4f);
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kLeakyRelu, kAlpha, 0, -0.4f), kAlpha);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kElu, kAlpha, -1.0f),
                  static_cast<float>(kAlpha * (std::exp(-1.0) - 1)));
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kElu, kAlpha, 0, 0.0f), kAlpha);  // y + alpha
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kSigmoid, 0, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kSigmoid, 0, 0, 0.5f), 0.25f);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kTanh, 0, 0.0f), 0.0f);
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kTanh, 0, 0, 0.0f), 1.0f);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kGelu, 0, 0.0f), 0.0f);
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kGelu, 0, 0.0f, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kSoftplus, 0, 0.0f), static_cast<float>(std::log(2.0)));
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kSoftplus, 0, 0.0f, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kSwish, 0, 0.0f), 0.0f);
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kSwish, 0, 0.0f, 0.0f), 0.5f);
  // Far out: no overflow, the asymptotes.
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kSoftplus, 0, 1000.0f), 1000.0f);
  EXPECT_EQ(Activate(DenseActivation::kSoftplus, 0, -1000.0f), 0.0f);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kSigmoid, 0, 100.0f), 1.0f);
  EXPECT_EQ(Activate(DenseActivation::kSigmoid, 0, -1000.0f), 0.0f);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kTanh, 0, 50.0f), 1.0f);
  EXPECT_FLOAT_EQ(Derivative(DenseActivation::kGelu, 0, 10.0f, 0.0f), 1.0f);
  EXPECT_NEAR(Derivative(DenseActivation::kGelu, 0, -10.0f, 0.0f), 0.0f, 1e-12);
  EXPECT_FLOAT_EQ(Activate(DenseActivation::kElu, kAlpha, -inf), -kAlpha);
  // A NaN stays a NaN (divergence is detected downstream).
  EXPECT_TRUE(std::isnan(Activate(DenseActivation::kSoftplus, 0, std::nanf(""))));
  EXPECT_TRUE(std::isnan(Activate(DenseActivation::kTanh, 0, std::nanf(""))));
}

}  // namespace
}  // namespace traind::engine
