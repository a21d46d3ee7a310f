// The NVMe I/O layer: the aio engine (io_uring and pread/pwrite, every aio
// option), swap files (O_DIRECT and its fallback, faults, stale files,
// checksums), the swap space's buffer pool, and its simulated drives (the
// virtual store, Note [Virtual NVMe]).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/nvme/aio_engine.h"
#include "zeroshard/runtime/nvme/swap_file.h"
#include "zeroshard/runtime/nvme/swap_space.h"
#include "zeroshard/runtime/virtual_device.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// A fresh directory under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  static int n = 0;
  const std::string d = absl::StrCat(::testing::TempDir(), "/nvme_", ::getpid(), "_", n++, "_", name);
  EXPECT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
  return d;
}

// An aligned buffer of `bytes` (a multiple of 4096).
struct Aligned {
  explicit Aligned(int64_t bytes) : n(bytes) {
    EXPECT_EQ(::posix_memalign(&p, 4096, static_cast<size_t>(bytes)), 0);
  }
  ~Aligned() { std::free(p); }
  char* data() { return static_cast<char*>(p); }
  void* p = nullptr;
  int64_t n;
};

void FillRandom(char* p, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<char>(rng());
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

bool Exists(const std::string& path) { return FileSize(path) >= 0; }

// ================================================================ engine

struct EngineCase {
  bool uring;
  AioOptions aio;
};

TEST(AioEngine, RoundTripsEveryOptionOnBothBackends) {
  std::vector<EngineCase> cases;
  for (bool uring : {true, false}) {
    cases.push_back({uring, AioOptions{}});
    cases.push_back({uring, AioOptions{.block_size = 4096, .queue_depth = 1, .thread_count = 1}});
    cases.push_back({uring, AioOptions{.block_size = 8192, .queue_depth = 4, .thread_count = 3,
                                       .single_submit = true, .overlap_events = false}});
    cases.push_back({uring, AioOptions{.block_size = 4096, .queue_depth = 16, .thread_count = 2,
                                       .single_submit = false, .overlap_events = false}});
  }
  const std::string dir = FreshDir("engine");
  const int64_t bytes = 3 * 65536 + 4096 * 5;  // not a multiple of the block sizes
  Aligned src(bytes), dst(bytes);
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(absl::StrCat("case ", c, " uring ", cases[c].uring, " ", cases[c].aio.ToString()));
    auto faults = std::make_shared<IoFaults>();
    faults->refuse_io_uring = !cases[c].uring;
    ZS_ASSERT_OK_AND_ASSIGN(auto engine, AioEngine::Create(cases[c].aio, faults));
    EXPECT_EQ(engine->backend(), cases[c].uring ? AioEngine::Backend::kIoUring : AioEngine::Backend::kThreads);
    if (!cases[c].uring) { EXPECT_THAT(engine->fallback_note(), HasSubstr("pread/pwrite")); }
    const std::string path = absl::StrCat(dir, "/f", c);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
    ASSERT_GE(fd, 0);
    FillRandom(src.data(), bytes, static_cast<uint32_t>(c));
    std::memset(dst.data(), 0, bytes);
    // Two transfers in flight at once, at an offset.
    auto w1 = engine->Submit(IoKind::kWrite, fd, src.data(), bytes / 2 - 2048 * 0, 4096, "first half");
    auto w2 = engine->Submit(IoKind::kWrite, fd, src.data() + bytes / 2, bytes - bytes / 2, 4096 + bytes / 2,
                             "second half");
    ZS_EXPECT_OK(w1->Wait());
    ZS_EXPECT_OK(w2->Wait());
    EXPECT_EQ(FileSize(path), 4096 + bytes);
    ZS_EXPECT_OK(engine->Submit(IoKind::kRead, fd, dst.data(), bytes, 4096, "all")->Wait());
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), bytes), 0);
    ::close(fd);
  }
}

TEST(AioEngine, FullDiskIsAShortWriteThenResourceExhausted) {
  for (bool uring : {true, false}) {
    SCOPED_TRACE(uring ? "io_uring" : "threads");
    auto faults = std::make_shared<IoFaults>();
    faults->refuse_io_uring = !uring;
    faults->write_budget = 3 * 4096;  // the "disk" holds 12 KiB more
    ZS_ASSERT_OK_AND_ASSIGN(auto engine, AioEngine::Create(AioOptions{.block_size = 8192}, faults));
    const std::string path = absl::StrCat(FreshDir("full"), "/f");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
    ASSERT_GE(fd, 0);
    Aligned src(65536);
    FillRandom(src.data(), src.n, 1);
    EXPECT_THAT(engine->Submit(IoKind::kWrite, fd, src.data(), src.n, 0, "unit 7")->Wait(),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("unit 7: writing"), HasSubstr("No space left on device"))));
    EXPECT_EQ(faults->write_budget.load(), 0);
    EXPECT_EQ(FileSize(path), 3 * 4096);  // what fitted was written
    ::close(fd);
  }
}

TEST(AioEngine, ReadPastTheEndIsDataLoss) {
  for (bool uring : {true, false}) {
    auto faults = std::make_shared<IoFaults>();
    faults->refuse_io_uring = !uring;
    ZS_ASSERT_OK_AND_ASSIGN(auto engine, AioEngine::Create(AioOptions{.block_size = 4096}, faults));
    const std::string path = absl::StrCat(FreshDir("eof"), "/f");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 8192), 0);
    Aligned dst(16384);
    EXPECT_THAT(engine->Submit(IoKind::kRead, fd, dst.data(), dst.n, 0, "unit 2")->Wait(),
                StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("unit 2"), HasSubstr("truncated"))));
    ::close(fd);
  }
}

TEST(AioEngine, RejectsBadOptions) {
  EXPECT_THAT(AioEngine::Create(AioOptions{.block_size = 1000}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aio.block_size")));
  EXPECT_THAT(AioEngine::Create(AioOptions{.queue_depth = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aio.queue_depth")));
  EXPECT_THAT(AioEngine::Create(AioOptions{.thread_count = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aio.thread_count")));
}

// ================================================================ swap file

struct FileFixture {
  std::unique_ptr<AioEngine> engine = AioEngine::Create(AioOptions{.block_size = 8192}).value();
};

TEST(SwapFile, RegionsAreAlignedPreallocatedAndRemovedAtTheEnd) {
  FileFixture fx;
  const std::string dir = FreshDir("file");
  std::string path;
  {
    ZS_ASSERT_OK_AND_ASSIGN(auto f, SwapFile::Create({.dir = dir, .tag = "optimizer", .rank = 3},
                                                     {100, 4096, 5000}, {"a", "b", "c"}, fx.engine.get()));
    path = f->path();
    EXPECT_THAT(path, HasSubstr(absl::StrCat("zeroshard-", ::getpid(), "-")));
    EXPECT_THAT(path, HasSubstr("-rank3-optimizer.swap"));
    EXPECT_TRUE(f->direct());  // ext4 and tmpfs (Linux >= 6.6) take O_DIRECT
    EXPECT_EQ(f->region_bytes(0), 4096);
    EXPECT_EQ(f->region_bytes(2), 8192);
    EXPECT_EQ(f->file_bytes(), 4096 * 4);
    EXPECT_EQ(FileSize(path), 4096 * 4);
    Aligned a(8192), b(8192);
    FillRandom(a.data(), a.n, 5);
    ZS_ASSERT_OK(f->Write(2, a.data())->Wait());
    ZS_ASSERT_OK(f->Read(2, b.data())->Wait());
    ZS_EXPECT_OK(f->Verify(2, b.data()));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 8192), 0);
    EXPECT_THAT(f->Read(0, b.data())->Wait(), StatusIs(absl::StatusCode::kInternal, HasSubstr("ever written")));
  }
  EXPECT_FALSE(Exists(path));  // a clean exit removes the file
}

TEST(SwapFile, MissingReadOnlyAndNonDirectoryPathsFailClearly) {
  FileFixture fx;
  const std::string dir = FreshDir("paths");
  EXPECT_THAT(SwapFile::Create({.dir = dir + "/absent", .tag = "params"}, {4096}, {"u"}, fx.engine.get()).status(),
              StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("absent"), HasSubstr("existing directory"))));
  const std::string file = dir + "/plain";
  ::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  EXPECT_THAT(SwapFile::Create({.dir = file, .tag = "params"}, {4096}, {"u"}, fx.engine.get()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not a directory")));
  // A read-only mount (simulated: root ignores chmod) ...
  auto faults = std::make_shared<IoFaults>();
  faults->create_errno = EROFS;
  absl::Status ro = SwapFile::Create({.dir = dir, .tag = "params", .faults = faults}, {4096}, {"u"},
                                     fx.engine.get()).status();
  EXPECT_FALSE(ro.ok());
  EXPECT_THAT(std::string(ro.message()), AllOf(HasSubstr("Read-only file system"), HasSubstr(dir)));
  // ... and a directory without write permission, where chmod binds.
  if (::geteuid() != 0) {
    const std::string locked = FreshDir("locked");
    ASSERT_EQ(::chmod(locked.c_str(), 0555), 0);
    EXPECT_THAT(SwapFile::Create({.dir = locked, .tag = "params"}, {4096}, {"u"}, fx.engine.get()).status(),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(locked)));
    ::chmod(locked.c_str(), 0755);
  }
}

TEST(SwapFile, FallsBackToBufferedIoWhenODirectIsRefused) {
  FileFixture fx;
  auto faults = std::make_shared<IoFaults>();
  faults->refuse_o_direct = true;
  ZS_ASSERT_OK_AND_ASSIGN(auto f, SwapFile::Create({.dir = FreshDir("buffered"), .tag = "t", .faults = faults},
                                                   {8192}, {"u"}, fx.engine.get()));
  EXPECT_FALSE(f->direct());
  EXPECT_THAT(f->note(), HasSubstr("refuses O_DIRECT"));
  Aligned a(8192), b(8192);
  FillRandom(a.data(), a.n, 9);
  ZS_ASSERT_OK(f->Write(0, a.data())->Wait());
  ZS_ASSERT_OK(f->Read(0, b.data())->Wait());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 8192), 0);
}

TEST(SwapFile, NoRoomAtCreationNamesTheSizes) {
  FileFixture fx;
  // A disk with 1 MiB free (injected) ...
  auto faults = std::make_shared<IoFaults>();
  faults->write_budget = 1 << 20;
  const std::string dir = FreshDir("full_at_start");
  EXPECT_THAT(SwapFile::Create({.dir = dir, .tag = "t", .faults = faults}, {3 << 20}, {"u"}, fx.engine.get()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("the swap file needs 3.00 MiB but the filesystem has 1.00 MiB free")));
  // ... and a file larger than the filesystem can hold at all (fails at once, allocating nothing).
  EXPECT_THAT(SwapFile::Create({.dir = dir, .tag = "t"}, {int64_t{1} << 50}, {"u"}, fx.engine.get()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, AllOf(HasSubstr("needs"), HasSubstr("free"))));
  // Nothing is left behind.
  EXPECT_EQ(SwapFile::RemoveStaleFiles(dir).first, 0);
  DIR* d = ::opendir(dir.c_str());
  int entries = 0;
  while (dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(entries, 0);
}

TEST(SwapFile, ChangedUnderneathIsDataLossInCheckModeOnly) {
  FileFixture fx;
  for (bool check : {true, false}) {
    ZS_ASSERT_OK_AND_ASSIGN(auto f, SwapFile::Create({.dir = FreshDir("changed"), .tag = "t",
                                                      .verify_checksums = check},
                                                     {8192, 8192}, {"unit 0", "unit 1"}, fx.engine.get()));
    Aligned a(8192), b(8192);
    FillRandom(a.data(), a.n, 3);
    ZS_ASSERT_OK(f->Write(1, a.data())->Wait());
    // Another process scribbles one byte of region 1.
    const int fd = ::open(f->path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char junk = static_cast<char>(a.data()[100] ^ 0x5a);
    ASSERT_EQ(::pwrite(fd, &junk, 1, 8192 + 100), 1);
    ::close(fd);
    ZS_ASSERT_OK(f->Read(1, b.data())->Wait());
    if (check) {
      EXPECT_THAT(f->Verify(1, b.data()),
                  StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("region 1 (unit 1)"),
                                                              HasSubstr("changed underneath"))));
    } else {
      ZS_EXPECT_OK(f->Verify(1, b.data()));  // garbage goes unnoticed: what check mode is for
      EXPECT_NE(std::memcmp(a.data(), b.data(), 8192), 0);
    }
  }
}

TEST(SwapFile, TruncatedUnderneathIsDataLoss) {
  FileFixture fx;
  ZS_ASSERT_OK_AND_ASSIGN(auto f, SwapFile::Create({.dir = FreshDir("trunc"), .tag = "t", .verify_checksums = false},
                                                   {8192, 8192}, {"unit 0", "unit 1"}, fx.engine.get()));
  Aligned a(8192);
  FillRandom(a.data(), a.n, 4);
  ZS_ASSERT_OK(f->Write(1, a.data())->Wait());
  ASSERT_EQ(::truncate(f->path().c_str(), 8192 + 4096), 0);
  EXPECT_THAT(f->Read(1, a.data())->Wait(),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("region 1 (unit 1)"), HasSubstr("truncated"))));
}

TEST(SwapFile, RemovesStaleFilesOfExitedProcessesOnly) {
  FileFixture fx;
  const std::string dir = FreshDir("stale");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid that no longer runs
  const std::string dead = absl::StrCat(dir, "/zeroshard-", child, "-0-rank0-optimizer.swap");
  const std::string alive = dir + "/zeroshard-1-0-rank0-optimizer.swap";  // init never exits
  const std::string other = dir + "/notes.txt";
  for (const std::string& p : {dead, alive, other}) {
    const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_EQ(::write(fd, "0123456789", 10), 10);
    ::close(fd);
  }
  ZS_ASSERT_OK_AND_ASSIGN(auto f, SwapFile::Create({.dir = dir, .tag = "t"}, {4096}, {"u"}, fx.engine.get()));
  EXPECT_THAT(f->note(), HasSubstr("removed 1 stale swap file"));
  EXPECT_FALSE(Exists(dead));
  EXPECT_TRUE(Exists(alive));
  EXPECT_TRUE(Exists(other));
}

// ================================================================ swap space

// Region r holds the bytes r*1000 + i (as int32) for its `ints` elements.
void FillRegion(char* p, int r, int64_t ints, int32_t version) {
  auto* v = reinterpret_cast<int32_t*>(p);
  for (int64_t i = 0; i < ints; ++i) v[i] = r * 1000 + static_cast<int32_t>(i) + version * 7;
}
bool RegionIs(const char* p, int r, int64_t ints, int32_t version) {
  const auto* v = reinterpret_cast<const int32_t*>(p);
  for (int64_t i = 0; i < ints; ++i) {
    if (v[i] != r * 1000 + static_cast<int32_t>(i) + version * 7) return false;
  }
  return true;
}

TEST(SwapSpace, CyclesRegionsThroughFewBuffersWithPrefetch) {
  const int kRegions = 6;
  const std::vector<int64_t> ints = {3000, 10, 5000, 4096, 1, 2500};
  std::vector<int64_t> bytes;
  std::vector<std::string> names;
  for (int r = 0; r < kRegions; ++r) {
    bytes.push_back(ints[r] * 4);
    names.push_back(absl::StrCat("unit ", r));
  }
  for (int buffers : {1, 2, 3, 6}) {
    for (bool uring : {true, false}) {
      SCOPED_TRACE(absl::StrCat(buffers, " buffers, ", uring ? "io_uring" : "threads"));
      auto faults = std::make_shared<IoFaults>();
      faults->refuse_io_uring = !uring;
      CpuAllocator host;
      SwapSpaceOptions o{.name = "test state",
                         .file = {.dir = FreshDir("space"), .tag = "t", .faults = faults},
                         .aio = {.block_size = 4096, .queue_depth = 4, .thread_count = 2},
                         .buffer_count = buffers,
                         .pin_memory = true};
      ZS_ASSERT_OK_AND_ASSIGN(auto space, SwapSpace::Create(o, bytes, names, &host));
      EXPECT_EQ(space->buffer_count(), buffers);
      EXPECT_EQ(space->buffer_bytes(), 20480);
      EXPECT_GE(host.stats().bytes_in_use, buffers * 20480);  // the pool counts against the host
      for (int r = 0; r < kRegions; ++r) {
        ZS_ASSERT_OK_AND_ASSIGN(char* p, space->Acquire(r, /*overwrite=*/true));
        FillRegion(p, r, ints[r], 0);
        ZS_ASSERT_OK(space->Release(r, /*dirty=*/true));
      }
      for (int pass = 1; pass <= 3; ++pass) {
        for (int r = 0; r < kRegions; ++r) {
          space->Prefetch((r + 1) % kRegions);
          ZS_ASSERT_OK_AND_ASSIGN(char* p, space->Acquire(r));
          ASSERT_TRUE(RegionIs(p, r, ints[r], pass - 1)) << "pass " << pass << " region " << r;
          FillRegion(p, r, ints[r], pass);
          ZS_ASSERT_OK(space->Release(r, /*dirty=*/true));
        }
      }
      ZS_ASSERT_OK(space->Flush());
      const SwapStats& st = space->stats();
      EXPECT_EQ(st.writes, 4 * kRegions);
      if (buffers == kRegions) {
        EXPECT_EQ(st.reads, 0);  // everything stays cached
        EXPECT_EQ(st.hits, 3 * kRegions);
      } else {
        EXPECT_GT(st.reads, 0);
      }
      if (buffers >= 3 && buffers < kRegions) { EXPECT_GT(st.prefetches, 0); }
      // Clean reads (no write back) keep the file's bytes.
      for (int r = 0; r < kRegions; ++r) {
        ZS_ASSERT_OK_AND_ASSIGN(char* p, space->Acquire(r));
        EXPECT_TRUE(RegionIs(p, r, ints[r], 3));
        ZS_ASSERT_OK(space->Release(r, /*dirty=*/false));
      }
    }
  }
}

TEST(SwapSpace, WithoutOverlapNothingIsReadAheadOrLeftWriting) {
  SwapSpaceOptions o{.name = "state", .file = {.dir = FreshDir("no_overlap"), .tag = "t"}, .buffer_count = 3,
                     .read_ahead = false, .write_behind = false};
  ZS_ASSERT_OK_AND_ASSIGN(auto space, SwapSpace::Create(o, {8192, 8192, 8192, 8192}, {"a", "b", "c", "d"}));
  for (int pass = 0; pass < 3; ++pass) {
    for (int r = 0; r < 4; ++r) {
      EXPECT_FALSE(space->Prefetch((r + 1) % 4));
      ZS_ASSERT_OK_AND_ASSIGN(char* p, space->Acquire(r, /*overwrite=*/pass == 0));
      if (pass > 0) { ASSERT_TRUE(RegionIs(p, r, 2048, pass - 1)); }
      FillRegion(p, r, 2048, pass);
      ZS_ASSERT_OK(space->Release(r, true));
    }
  }
  EXPECT_EQ(space->stats().prefetches, 0);
  EXPECT_EQ(space->stats().writes, 12);
  EXPECT_GT(space->stats().reads, 0);
}

TEST(SwapSpace, TooFewBuffersForRegionsHeldAtOnceFailsClearly) {
  SwapSpaceOptions o{.name = "params", .file = {.dir = FreshDir("few"), .tag = "t"}, .buffer_count = 2};
  ZS_ASSERT_OK_AND_ASSIGN(auto space, SwapSpace::Create(o, {4096, 4096, 4096}, {"a", "b", "c"}));
  ZS_ASSERT_OK(space->Acquire(0, true).status());
  ZS_ASSERT_OK(space->Acquire(1, true).status());
  EXPECT_THAT(space->Acquire(2, true).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, AllOf(HasSubstr("NVMe swap of params"),
                                                                   HasSubstr("buffer_count is too small"))));
  EXPECT_THAT(SwapSpace::Create({.name = "x", .file = {.dir = FreshDir("zero"), .tag = "t"}, .buffer_count = 0},
                                {4096}, {"a"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("buffer_count must be at least 1")));
}

TEST(SwapSpace, AWriteErrorIsStickyAndNamesTheRegion) {
  auto faults = std::make_shared<IoFaults>();
  SwapSpaceOptions o{.name = "optimizer state", .file = {.dir = FreshDir("sticky"), .tag = "t", .faults = faults},
                     .aio = {.block_size = 4096}, .buffer_count = 1};
  ZS_ASSERT_OK_AND_ASSIGN(auto space, SwapSpace::Create(o, {16384, 16384}, {"unit 0", "unit 1"}));
  faults->write_budget = 16384 + 4096;  // unit 0 fits, unit 1 does not
  for (int r = 0; r < 2; ++r) {
    ZS_ASSERT_OK(space->Acquire(r, true).status());
    ZS_ASSERT_OK(space->Release(r, true));
  }
  const absl::Status s = space->Flush();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted,
                          AllOf(HasSubstr("NVMe swap of optimizer state"), HasSubstr("region 1 (unit 1)"),
                                HasSubstr("No space left on device"))));
  EXPECT_EQ(space->Acquire(0).status(), s);
  EXPECT_FALSE(space->Prefetch(0));
}

TEST(SwapSpace, ChangedUnderneathSurfacesAtAcquire) {
  SwapSpaceOptions o{.name = "optimizer state", .file = {.dir = FreshDir("verify"), .tag = "t"}, .buffer_count = 1};
  ZS_ASSERT_OK_AND_ASSIGN(auto space, SwapSpace::Create(o, {8192, 8192}, {"unit 0", "unit 1"}));
  for (int r = 0; r < 2; ++r) {
    ZS_ASSERT_OK_AND_ASSIGN(char* p, space->Acquire(r, true));
    FillRegion(p, r, 2048, 0);
    ZS_ASSERT_OK(space->Release(r, true));
  }
  ZS_ASSERT_OK(space->Flush());
  const int fd = ::open(space->file().path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "xxxx", 4, 16), 4);  // region 0 (evicted by region 1's buffer)
  ::close(fd);
  EXPECT_THAT(space->Acquire(0).status(),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("region 0 (unit 0)"), HasSubstr("CRC-32C"))));
}

// Note [Swap faults]: a device that can no longer return what it stored (EIO
// on read, injected) fails the Acquire with DataLoss naming the file and the
// region, on both backends; the error is sticky, and the file was not touched.
TEST(SwapSpace, AnIoErrorOnReadIsDataLossNamingTheRegion) {
  for (bool uring : {true, false}) {
    SCOPED_TRACE(uring ? "io_uring" : "threads");
    auto faults = std::make_shared<IoFaults>();
    faults->refuse_io_uring = !uring;
    SwapSpaceOptions o{.name = "optimizer state", .file = {.dir = FreshDir("eio"), .tag = "t", .faults = faults},
                       .aio = {.block_size = 4096}, .buffer_count = 1};
    ZS_ASSERT_OK_AND_ASSIGN(auto space, SwapSpace::Create(o, {8192, 8192}, {"unit 0", "unit 1"}));
    for (int r = 0; r < 2; ++r) {
      ZS_ASSERT_OK_AND_ASSIGN(char* p, space->Acquire(r, true));
      FillRegion(p, r, 2048, 0);
      ZS_ASSERT_OK(space->Release(r, true));
    }
    ZS_ASSERT_OK(space->Flush());
    faults->read_errno = EIO;
    const absl::Status s = space->Acquire(0).status();  // region 0 was evicted: read from the file
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss,
                            AllOf(HasSubstr("NVMe swap of optimizer state"), HasSubstr(space->file().path()),
                                  HasSubstr("region 0 (unit 0)"), HasSubstr("Input/output error"))));
    faults->read_errno = 0;
    EXPECT_EQ(space->Acquire(0).status(), s);  // sticky
  }
}

// ================================================================ virtual store

// Reads at 1 GB/s, writes at 0.5 GB/s, 10 us per transfer; nothing else costs.
class DriveCost final : public VirtualCostModel {
 public:
  double OpSeconds(const OpCost&) const override { return 0; }
  double LaunchSeconds() const override { return 0; }
  double HostCopySeconds(int64_t) const override { return 0; }
  double NvmeSeconds(bool write, int64_t bytes) const override {
    return 1e-5 + static_cast<double>(bytes) / (write ? 0.5e9 : 1e9);
  }
};

// A swap space on a virtual device's host side: no file (the nvme_path does
// not exist), buffers counted by the virtual host allocator, and the
// transfers on the "nvme" track. Times in closed form: a region of 1 MiB
// (1,048,576 B) reads in 1e-5 + 1.048576e-3 s and writes in 1e-5 +
// 2.097152e-3 s; Wait moves the host clock to a transfer's end. Every clock
// is a sum of a few such doubles: 1e-15 s is far above their rounding.
TEST(SwapSpace, OnAVirtualHostTheTransfersAreTimedNotDone) {
  DriveCost cost;
  absl::StatusOr<std::unique_ptr<VirtualDevice>> dev =
      VirtualDevice::Create(950, {.cost = &cost, .host_index = 951});
  ASSERT_TRUE(dev.ok()) << dev.status();
  VirtualDevice& d = **dev;
  constexpr int64_t kMiB = 1 << 20;
  const double read_s = 1e-5 + kMiB / 1e9, write_s = 1e-5 + kMiB / 0.5e9;
  SwapSpaceOptions o{.name = "optimizer state", .file = {.dir = "/nonexistent/nvme", .tag = "optimizer"},
                     .buffer_count = 2};
  absl::StatusOr<std::unique_ptr<SwapSpace>> s = SwapSpace::Create(o, {kMiB, kMiB, kMiB}, {"a", "b", "c"},
                                                                   d.host_allocator());
  ASSERT_TRUE(s.ok()) << s.status();
  SwapSpace& space = **s;
  EXPECT_EQ(space.file().path(), "");
  EXPECT_THAT(space.ToString(), HasSubstr("simulated NVMe of virtual:951"));
  EXPECT_EQ(space.device(), Device::Virtual(951));
  // The two buffers (each 1 MiB plus the alignment slack) are host memory.
  EXPECT_EQ(d.host_allocator()->stats().bytes_in_use, 2 * (kMiB + kDirectIoAlignment));

  // Writing the initial values: no read; each release starts a write at the
  // host's time, queued on the one track.
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(space.Acquire(r, /*overwrite=*/true).ok());
    ASSERT_TRUE(space.Release(r, /*dirty=*/true).ok());
  }
  // Region 2 needed a buffer: it waited for the oldest write (region 0's).
  EXPECT_NEAR(d.host_time(), write_s, 1e-15);
  ASSERT_TRUE(space.Flush().ok());
  EXPECT_NEAR(d.host_time(), 3 * write_s, 1e-15);
  EXPECT_EQ(space.stats().bytes_written, 3 * kMiB);
  EXPECT_EQ(space.stats().reads, 0);

  // Region 0 is no longer in a buffer: a read ahead starts now, and the host
  // works 5 ms meanwhile, longer than the read: the Acquire waits for nothing.
  const double t0 = d.host_time();
  EXPECT_TRUE(space.Prefetch(0));
  d.HostAdvance(5e-3);
  ASSERT_TRUE(space.Acquire(0).ok());
  EXPECT_NEAR(d.host_time(), t0 + 5e-3, 1e-15);
  // The read ahead took the least recently used clean buffer (region 1's);
  // region 2 is still clean in the other: a hit, no read.
  ASSERT_TRUE(space.Acquire(2).ok());
  EXPECT_EQ(space.stats().hits, 1);
  ASSERT_TRUE(space.Release(2, /*dirty=*/false).ok());
  ASSERT_TRUE(space.Release(0, /*dirty=*/false).ok());
  // Region 1 without a read ahead: the host waits for the whole read.
  const double t1 = d.host_time();
  ASSERT_TRUE(space.Acquire(1).ok());
  EXPECT_NEAR(d.host_time(), t1 + read_s, 1e-15);
  ASSERT_TRUE(space.Release(1, /*dirty=*/false).ok());
  EXPECT_EQ(space.stats().bytes_read, 2 * kMiB);
  // Waited: region 0's write (for region 2's buffer), the rest of the writes
  // at the Flush, and region 1's read.
  EXPECT_NEAR(space.stats().wait_seconds, 3 * write_s + read_s, 1e-15);

  // The track: 3 writes then 2 reads, each its NvmeSeconds, never overlapping.
  int writes = 0, reads = 0;
  double last = 0;
  for (const VirtualSpan& sp : d.spans()) {
    if (sp.category != "nvme") continue;
    EXPECT_EQ(d.stream_name(sp.stream), "nvme");
    EXPECT_EQ(sp.bytes, static_cast<double>(kMiB));
    EXPECT_NEAR(sp.end - sp.start, sp.name == "NvmeWrite" ? write_s : read_s, 1e-15);
    EXPECT_GE(sp.start, last - 1e-15);
    last = sp.end;
    (sp.name == "NvmeWrite" ? writes : reads) += 1;
  }
  EXPECT_EQ(writes, 3);
  EXPECT_EQ(reads, 2);
}

}  // namespace
}  // namespace zeroshard
