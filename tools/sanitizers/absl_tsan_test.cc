// tools/sanitizers/tsan_support.cc: each absl primitive the wrappers cover hands
// plain (non-atomic) data from one thread to another (and two threads compile
// regexes, for the libstdc++ cache it fills). Under --config=tsan
// (halt_on_error=1) a missing happens-before edge is a "data race" report that
// ends the test; without the wrappers every case here is reported. A write
// outside the lock must still be reported (the wrappers add no edge that the
// code does not have). In other builds the same cases check the values only.
#include <dlfcn.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace zeroshard::testing {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif

// Long enough never to expire on a loaded 2-core machine under TSan (the
// waits end as soon as the other thread acts, in microseconds).
const absl::Duration kLong = absl::Seconds(60);

template <typename F>
void RunThreads(int n, F f) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(f, i);
  for (std::thread& t : threads) t.join();
}

TEST(AbslTsan, TheWrappersAreTheDefinitionsInUse) {
  if (!kTsan) GTEST_SKIP() << "only linked under --config=tsan";
  void* lock = dlsym(RTLD_DEFAULT, "_ZN4absl7debian35Mutex4LockEv");
  ASSERT_NE(lock, nullptr);
  Dl_info info{};
  ASSERT_NE(dladdr(lock, &info), 0);
  EXPECT_THAT(std::string(info.dli_fname),
              ::testing::Not(::testing::HasSubstr("libabsl_synchronization")));
}

TEST(AbslTsan, LockAndReaderLock) {
  absl::Mutex mu;
  int64_t counter = 0;  // guarded by mu
  constexpr int kThreads = 4, kSteps = 200;
  std::vector<int64_t> last_read(kThreads, -1);  // each thread its own slot
  RunThreads(kThreads, [&](int i) {
    for (int s = 0; s < kSteps; ++s) {
      if (i % 2 == 0) {
        absl::MutexLock l(&mu);
        ++counter;
      } else {
        absl::ReaderMutexLock l(&mu);
        last_read[i] = counter;
      }
    }
  });
  EXPECT_EQ(counter, int64_t{kThreads / 2} * kSteps);
  for (int i = 1; i < kThreads; i += 2) {
    EXPECT_GE(last_read[i], 0);
    EXPECT_LE(last_read[i], counter);
  }
}

TEST(AbslTsan, TryLockAndReaderTryLock) {
  absl::Mutex mu;
  int64_t counter = 0;
  int64_t reads = 0;
  RunThreads(2, [&](int i) {
    for (int done = 0; done < 100;) {
      if (i == 0 && mu.TryLock()) {
        ++counter;
        mu.Unlock();
        ++done;
      } else if (i == 1 && mu.ReaderTryLock()) {
        reads += counter >= 0 ? 1 : 0;  // `reads` is this thread's own
        mu.ReaderUnlock();
        ++done;
      } else {
        std::this_thread::yield();
      }
    }
  });
  EXPECT_EQ(counter, 100);
  EXPECT_EQ(reads, 100);
}

// Await: the condition is evaluated by the thread in Unlock, then the waiter
// writes the data the condition read.
TEST(AbslTsan, AwaitHandsOffBothWays) {
  absl::Mutex mu;
  int64_t value = 0;  // guarded by mu; the two threads take turns
  constexpr int kRounds = 100;
  struct Turn {
    const int64_t* value;
    int parity;
  };
  RunThreads(2, [&](int i) {
    Turn mine{&value, i};
    absl::MutexLock l(&mu);
    for (int r = 0; r < kRounds; ++r) {
      // Thread 0 moves even values to odd, thread 1 odd to even.
      mu.Await(absl::Condition(+[](Turn* t) { return *t->value % 2 == t->parity; }, &mine));
      ++value;
    }
  });
  EXPECT_EQ(value, 2 * kRounds);
}

TEST(AbslTsan, AwaitWithTimeoutAndDeadline) {
  absl::Mutex mu;
  int64_t value = 0;
  RunThreads(2, [&](int i) {
    absl::MutexLock l(&mu);
    if (i == 0) {
      EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(+[](int64_t* v) { return *v == 1; }, &value),
                                      kLong));
      value = 2;
      EXPECT_TRUE(mu.AwaitWithDeadline(absl::Condition(+[](int64_t* v) { return *v == 3; }, &value),
                                       absl::Now() + kLong));
      value = 4;
    } else {
      value = 1;
      EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(+[](int64_t* v) { return *v == 2; }, &value),
                                      kLong));
      value = 3;
    }
  });
  EXPECT_EQ(value, 4);
  // Expiring still returns with the lock held.
  absl::MutexLock l(&mu);
  EXPECT_FALSE(mu.AwaitWithTimeout(absl::Condition(+[](int64_t* v) { return *v == 9; }, &value),
                                   absl::Milliseconds(5)));
}

TEST(AbslTsan, LockWhenFormsTakeTheLock) {
  absl::Mutex mu;
  int64_t stage = 0;
  int64_t data = 0;
  struct Stage {
    const int64_t* stage;
    int64_t want;
  };
  Stage stages[5] = {{&stage, 0}, {&stage, 1}, {&stage, 2}, {&stage, 3}, {&stage, 4}};
  auto at = [&](int64_t s) {
    return absl::Condition(+[](Stage* p) { return *p->stage == p->want; }, &stages[s]);
  };
  RunThreads(2, [&](int i) {
    if (i == 0) {
      mu.LockWhen(at(0));
      data = 10;
      stage = 1;
      mu.Unlock();
      EXPECT_TRUE(mu.LockWhenWithTimeout(at(2), kLong));
      data += 100;
      stage = 3;
      mu.Unlock();
      mu.ReaderLockWhen(at(4));
      EXPECT_EQ(data, 1111);
      mu.ReaderUnlock();
    } else {
      EXPECT_TRUE(mu.ReaderLockWhenWithTimeout(at(1), kLong));
      EXPECT_EQ(data, 10);
      mu.ReaderUnlock();
      mu.Lock();
      data += 1;
      stage = 2;
      mu.Unlock();
      EXPECT_TRUE(mu.LockWhenWithDeadline(at(3), absl::Now() + kLong));
      data += 1000;
      stage = 4;
      mu.Unlock();
      EXPECT_TRUE(mu.ReaderLockWhenWithDeadline(at(4), absl::Now() + kLong));
      EXPECT_EQ(data, 1111);
      mu.ReaderUnlock();
    }
  });
  EXPECT_EQ(data, 1111);
}

TEST(AbslTsan, CondVarWaits) {
  absl::Mutex mu;
  absl::CondVar cv;
  int64_t stage = 0;
  std::vector<int64_t> log;  // guarded by mu
  RunThreads(2, [&](int i) {
    absl::MutexLock l(&mu);
    if (i == 0) {
      while (stage != 1) cv.Wait(&mu);
      log.push_back(1);
      stage = 2;
      cv.SignalAll();
      while (stage != 3) cv.WaitWithDeadline(&mu, absl::Now() + kLong);
      log.push_back(3);
    } else {
      log.push_back(0);
      stage = 1;
      cv.Signal();
      while (stage != 2) cv.WaitWithTimeout(&mu, kLong);
      log.push_back(2);
      stage = 3;
      cv.SignalAll();
    }
  });
  EXPECT_THAT(log, ::testing::ElementsAre(0, 1, 2, 3));
}

TEST(AbslTsan, NotificationWaits) {
  std::vector<int64_t> data;  // written before Notify, read after a wait
  absl::Notification ready;
  RunThreads(4, [&](int i) {
    if (i == 0) {
      data = {1, 2, 3};
      ready.Notify();
    } else if (i == 1) {
      // Most often notified by now: the fast path, without the mutex in absl.
      absl::SleepFor(absl::Milliseconds(20));
      ready.WaitForNotification();
      EXPECT_EQ(data.size(), 3u);
    } else if (i == 2) {
      EXPECT_TRUE(ready.WaitForNotificationWithTimeout(kLong));
      EXPECT_EQ(data[1], 2);
    } else {
      EXPECT_TRUE(ready.WaitForNotificationWithDeadline(absl::Now() + kLong));
      EXPECT_EQ(data[2], 3);
    }
  });
}

// HasBeenNotified() is inline: an acquire load of `notified_yet_` in our code.
TEST(AbslTsan, HasBeenNotifiedPolling) {
  for (int round = 0; round < 20; ++round) {
    int64_t data = 0;
    absl::Notification ready;
    std::thread writer([&] {
      data = round + 1;
      ready.Notify();
    });
    while (!ready.HasBeenNotified()) std::this_thread::yield();
    EXPECT_EQ(data, round + 1);
    writer.join();
  }
}

TEST(AbslTsan, BlockingCounterAndBarrier) {
  constexpr int kThreads = 4;
  std::vector<int64_t> slots(kThreads, 0);
  absl::BlockingCounter counter(kThreads);
  auto* barrier = new absl::Barrier(kThreads);  // deleted by the last to leave
  std::vector<int64_t> after_barrier(kThreads, 0);
  std::thread waiter([&] {
    counter.Wait();
    int64_t sum = 0;
    for (int64_t s : slots) sum += s;
    EXPECT_EQ(sum, 1 + 2 + 3 + 4);
  });
  RunThreads(kThreads, [&](int i) {
    slots[i] = i + 1;
    counter.DecrementCount();
    after_barrier[i] = i;
    if (barrier->Block()) delete barrier;
    // Every thread's write before the barrier is visible after it.
    int64_t sum = 0;
    for (int64_t a : after_barrier) sum += a;
    EXPECT_EQ(sum, 0 + 1 + 2 + 3);
  });
  waiter.join();
}

// libstdc++'s narrow cache (GCC PR 77704), which tsan_support.cc fills at load:
// two threads compile regexes at once, as the ranks do in checkpoint/load.cc.
TEST(AbslTsan, RegexesCompiledOnTwoThreads) {
  std::vector<std::string> out(2);
  RunThreads(2, [&](int i) {
    out[i] = std::regex_replace("layers.0.attn.weight", std::regex("^layers\\.(\\d+)\\."),
                                "h.$1.");
  });
  EXPECT_EQ(out[0], "h.0.attn.weight");
  EXPECT_EQ(out[1], "h.0.attn.weight");
}

// Copies of one error Status on several threads: the last to drop its copy
// deletes the shared message the others read (tsan_support.cc's
// Status::UnrefNonInlined).
TEST(AbslTsan, AStatusSharedByThreads) {
  for (int round = 0; round < 20; ++round) {
    absl::Status shared = absl::DataLossError(absl::StrCat("round ", round, " of a shared status"));
    std::vector<std::string> seen(3);
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) {
      threads.emplace_back([i, &seen, copy = shared]() mutable {
        seen[i] = std::string(copy.message());
        copy = absl::OkStatus();  // drops this thread's reference here
      });
    }
    shared = absl::OkStatus();  // any of the four owners may be the last
    for (std::thread& t : threads) t.join();
    for (const std::string& s : seen) {
      EXPECT_EQ(s, absl::StrCat("round ", round, " of a shared status"));
    }
  }
}

// absl::ErrnoToStatus's errno text table, built at load by tsan_support.cc.
TEST(AbslTsan, ErrnoToStatusOnTwoThreads) {
  std::vector<absl::Status> out(2);
  RunThreads(2, [&](int i) { out[i] = absl::ErrnoToStatus(i == 0 ? ENOSPC : EIO, "writing"); });
  EXPECT_EQ(out[0].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(out[1].code(), absl::StatusCode::kUnknown);  // absl maps EIO to Unknown
  EXPECT_THAT(std::string(out[0].message()), ::testing::HasSubstr("No space left on device"));
}

// The control: the wrappers must not hide a real race. One thread writes under
// the lock, the other without it. (The value is read afterwards, so that the
// compiler keeps both stores.)
int64_t racy_value = 0;
absl::Mutex racy_mu;

int64_t WriteUnderTheLockAndWithout() {
  std::thread locked([] {
    absl::MutexLock l(&racy_mu);
    racy_value = 1;
  });
  std::thread unlocked([] { racy_value = 2; });
  locked.join();
  unlocked.join();
  return racy_value;
}

TEST(AbslTsanDeathTest, AWriteOutsideTheLockIsStillARace) {
  if (!kTsan) GTEST_SKIP() << "needs --config=tsan";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // 66 is TSan's exit code after a report (halt_on_error=1, .bazelrc test:tsan);
  // a run without one exits 0.
  EXPECT_EXIT(std::exit(WriteUnderTheLockAndWithout() > 0 ? 0 : 1),
              ::testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}

}  // namespace
}  // namespace zeroshard::testing
