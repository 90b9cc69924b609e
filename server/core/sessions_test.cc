#include "server/core/sessions.h"

#include <set>

#include "gtest/gtest.h"

namespace traind::server {
namespace {

class SessionStoreTest : public ::testing::Test {
 protected:
  SessionStoreTest() {
    SessionOptions o;
    o.ticket_ttl = absl::Minutes(1);
    o.session_ttl = absl::Hours(1);
    o.max_sessions = 3;
    o.now = [this] { return now_; };
    store_ = std::make_unique<SessionStore>(o);
  }
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  std::unique_ptr<SessionStore> store_;
  const Caller alice_{"alice", Role::kViewer, false};
};

TEST_F(SessionStoreTest, ATicketWorksOnceAndActsAsItsCaller) {
  SessionStore::Ticket t = store_->NewTicket(alice_);
  EXPECT_EQ(t.secret.size(), 64u);
  EXPECT_EQ(t.expire_time, now_ + absl::Minutes(1));
  std::optional<std::string> session = store_->RedeemTicket(t.secret);
  ASSERT_TRUE(session.has_value());
  EXPECT_NE(*session, t.secret);
  std::optional<Caller> c = store_->Lookup(*session);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->name, "alice");
  EXPECT_EQ(c->role, Role::kViewer);
  EXPECT_FALSE(store_->RedeemTicket(t.secret).has_value()) << "a ticket is good for one login";
  EXPECT_FALSE(store_->Lookup(t.secret).has_value()) << "a ticket is not a session";
}

TEST_F(SessionStoreTest, AnExpiredTicketOrSessionIsRefused) {
  SessionStore::Ticket t = store_->NewTicket(alice_);
  now_ += absl::Minutes(1);
  EXPECT_FALSE(store_->RedeemTicket(t.secret).has_value());
  std::string s = store_->NewSession(alice_);
  now_ += absl::Minutes(59);
  EXPECT_TRUE(store_->Lookup(s).has_value());
  now_ += absl::Minutes(1);
  EXPECT_FALSE(store_->Lookup(s).has_value());
}

TEST_F(SessionStoreTest, UnknownEmptyAndEndedSessionsAreRefused) {
  EXPECT_FALSE(store_->Lookup("").has_value());
  EXPECT_FALSE(store_->Lookup(std::string(64, 'a')).has_value());
  EXPECT_FALSE(store_->RedeemTicket("").has_value());
  std::string s = store_->NewSession(alice_);
  store_->End(s);
  EXPECT_FALSE(store_->Lookup(s).has_value());
}

TEST_F(SessionStoreTest, TheOldestSessionGoesBeyondTheLimit) {
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(store_->NewSession(alice_));
    now_ += absl::Seconds(1);
  }
  EXPECT_FALSE(store_->Lookup(ids[0]).has_value());
  for (int i = 1; i < 4; ++i) EXPECT_TRUE(store_->Lookup(ids[i]).has_value()) << i;
}

TEST(RandomSecretHexTest, IsHexAndDiffers) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string s = RandomSecretHex();
    ASSERT_EQ(s.size(), 64u);
    for (char c : s) ASSERT_TRUE(isxdigit(static_cast<unsigned char>(c))) << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace traind::server
