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

// One caller flooding logins replaces its own oldest sessions and tickets,
// never another caller's.
TEST(SessionStoreCapsTest, ACallerPushesOutOnlyItsOwn) {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  SessionOptions o;
  o.max_sessions = 100;
  o.max_tickets = 100;
  o.max_sessions_per_caller = 5;
  o.max_tickets_per_caller = 3;
  o.now = [&now] { return now; };
  SessionStore store(o);
  const Caller bob{"bob", Role::kViewer, false};
  const Caller eve{"eve", Role::kViewer, false};
  const std::string bobs = store.NewSession(bob);
  const SessionStore::Ticket bob_ticket = store.NewTicket(bob);
  std::vector<std::string> eves;
  std::vector<std::string> eve_tickets;
  for (int i = 0; i < 1000; ++i) {
    now += absl::Milliseconds(1);
    eves.push_back(store.NewSession(eve));
    eve_tickets.push_back(store.NewTicket(eve).secret);
  }
  EXPECT_TRUE(store.Lookup(bobs).has_value()) << "bob's session survives eve's flood";
  for (int i = 0; i < 995; ++i) EXPECT_FALSE(store.Lookup(eves[i]).has_value()) << i;
  for (int i = 995; i < 1000; ++i) EXPECT_TRUE(store.Lookup(eves[i]).has_value()) << i;
  EXPECT_FALSE(store.RedeemTicket(eve_tickets[996]).has_value());
  EXPECT_TRUE(store.RedeemTicket(eve_tickets[997]).has_value());
  EXPECT_TRUE(store.RedeemTicket(bob_ticket.secret).has_value()) << "bob's link still works";
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
