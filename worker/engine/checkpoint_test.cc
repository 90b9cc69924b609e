// The checkpoint file format: round trip, checksum, truncation.
#include "worker/engine/checkpoint.h"

#include <cstring>
#include <string>
#include <vector>

#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

TEST(Crc32Test, StandardCheckValue) {
  // The CRC-32/ISO-HDLC check value of "123456789".
  EXPECT_EQ(Crc32("123456789", 9), 0xCBF43926u);
}

TEST(CheckpointTest, RoundTripAndEveryByteIsProtected) {
  CheckpointWriter w;
  const float f[3] = {1.5f, -2.0f, 3.25f};
  w.PutFloats("w", f, 3);
  w.PutDoubles("d", {0.1, 0.2});
  w.PutInt64s("i", {7, -9});
  w.PutString("s", "hello");
  const std::string bytes = w.Serialize();
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Parse(bytes, "ck");
  ASSERT_TRUE(r.ok()) << r.status();
  float back[3];
  ASSERT_TRUE(r->GetFloats("w", back, 3).ok());
  EXPECT_THAT(back, ::testing::ElementsAre(1.5f, -2.0f, 3.25f));
  EXPECT_THAT(*r->GetDoubles("d"), ::testing::ElementsAre(0.1, 0.2));
  EXPECT_THAT(*r->GetInt64s("i"), ::testing::ElementsAre(7, -9));
  EXPECT_EQ(*r->GetString("s"), "hello");
  EXPECT_FALSE(r->GetFloats("w", back, 2).ok());  // wrong size
  EXPECT_EQ(r->GetString("nope").status().code(), absl::StatusCode::kNotFound);
  // Any flipped bit, and any truncation, is rejected.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_FALSE(CheckpointReader::Parse(bad, "ck").ok()) << i;
    EXPECT_FALSE(CheckpointReader::Parse(bytes.substr(0, i), "ck").ok()) << i;
  }
  absl::Status s = CheckpointReader::Parse(bytes.substr(0, bytes.size() - 1), "ck").status();
  EXPECT_EQ(FailureKindOf(s), FailureKind::kDataError);
}

TEST(CheckpointTest, StateIsStoredByOwnerAndKey) {
  CheckpointWriter w;
  StateWriter loop(&w, "loop");
  loop.PutInt("epoch", 7);
  loop.PutBool("stopped", true);
  loop.PutDouble("best", 0.25);
  loop.PutInts("order", {3, 1, 2});
  const float weights[2] = {0.5f, -1.0f};
  StateWriter model(&w, "state");
  model.PutFloats("layers[0].weight", weights, 2);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Parse(w.Serialize(), "ck");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r->GetInt64s("loop.epoch"), ::testing::ElementsAre(7));
  EXPECT_TRUE(r->Has("state.layers[0].weight"));
  StateReader in(*r, "loop");
  EXPECT_EQ(*in.GetInt("epoch"), 7);
  EXPECT_TRUE(*in.GetBool("stopped"));
  EXPECT_EQ(*in.GetDouble("best"), 0.25);
  EXPECT_THAT(*in.GetInts("order"), ::testing::ElementsAre(3, 1, 2));
  // A list is not a scalar; a missing key names its record.
  EXPECT_EQ(FailureKindOf(in.GetInt("order").status()), FailureKind::kDataError);
  absl::Status missing = in.GetInt("steps").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), ::testing::HasSubstr("\"loop.steps\""));
  float back[2];
  ASSERT_TRUE(StateReader(*r, "state").GetFloats("layers[0].weight", back, 2).ok());
  EXPECT_THAT(back, ::testing::ElementsAre(0.5f, -1.0f));
}

// Format version 1 (positional training counters) is refused by name.
TEST(CheckpointTest, VersionOneIsRefusedWithAClearError) {
  CheckpointWriter w;
  w.PutInt64s("counters", {1, 2, 3});
  std::string bytes = w.Serialize();
  const uint32_t one = 1;
  std::memcpy(bytes.data() + 8, &one, sizeof(one));
  absl::Status s = CheckpointReader::Parse(bytes, "epoch-000001.ckpt").status();
  EXPECT_EQ(FailureKindOf(s), FailureKind::kDataError);
  EXPECT_EQ(s.message(), "epoch-000001.ckpt: checkpoint format version 1 (expected 2)");
}

}  // namespace
}  // namespace traind::engine
