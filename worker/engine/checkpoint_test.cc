// The checkpoint file format: round trip, checksum, truncation.
#include "worker/engine/checkpoint.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/status.h"

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

}  // namespace
}  // namespace traind::engine
