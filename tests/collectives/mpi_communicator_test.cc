// The collectives suite on the MPI backend: one rank per process. Run under
// mpirun by mpi_test.sh (`-np 2` and `-np 4` targets). Every process runs
// every test; statuses are exchanged so all processes pass or fail together,
// and only rank 0 prints results and writes the gtest XML.
#include "zeroshard/collectives/mpi_communicator.h"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/collectives/collectives_suite.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {
namespace {

constexpr int kMessageBytes = 2048;

// Every rank's status, on every rank (over MPI_COMM_WORLD).
std::vector<absl::Status> ExchangeStatuses(const absl::Status& mine) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<char> send(kMessageBytes, 0), recv(static_cast<size_t>(kMessageBytes) * size);
  const int code = static_cast<int>(mine.code());
  std::memcpy(send.data(), &code, sizeof(code));
  const std::string text(mine.message().substr(0, kMessageBytes - sizeof(code) - 1));
  std::memcpy(send.data() + sizeof(code), text.data(), text.size());
  MPI_Allgather(send.data(), kMessageBytes, MPI_CHAR, recv.data(), kMessageBytes, MPI_CHAR,
                MPI_COMM_WORLD);
  std::vector<absl::Status> all;
  for (int r = 0; r < size; ++r) {
    const char* p = recv.data() + static_cast<size_t>(r) * kMessageBytes;
    int c = 0;
    std::memcpy(&c, p, sizeof(c));
    all.emplace_back(static_cast<absl::StatusCode>(c), std::string(p + sizeof(c)));
  }
  return all;
}

Backend MpiBackend() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return Backend{
      .name = absl::StrCat("mpi", size),
      .world_size = size,
      .run = [](const RankFn& fn, const CommunicatorOptions& options) {
        absl::Status status;
        {
          absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm =
              MpiCommunicator::Create(MPI_COMM_WORLD, MpiOptions{.comm = options});
          status = comm.ok() ? fn(**comm) : comm.status();
        }  // destroyed (drained) before MPI_COMM_WORLD is used again
        return ExchangeStatuses(status);
      },
  };
}

INSTANTIATE_TEST_SUITE_P(Mpi, CollectivesTest, ::testing::Values(MpiBackend()), BackendName);

TEST(MpiCommunicatorTest, SmallChunksPipelineTheReductions) {
  // Small chunks: many pipeline steps, uneven last chunks; the AllReduce is
  // past the one-round path for small messages.
  MpiOptions options{.chunk_bytes = 1000};
  absl::Status status = [&]() -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto comm, MpiCommunicator::Create(MPI_COMM_WORLD, options));
    const int n = comm->size(), r = comm->rank();
    const int64_t m = 10007;
    std::vector<float> v(n * m);
    for (int64_t j = 0; j < n * m; ++j) v[j] = static_cast<float>(r + j % 5);
    ZS_ASSIGN_OR_RETURN(Tensor in, Tensor::FromVector<float>(v, {n * m}));
    ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({m}, DType::kF32));
    ZS_RETURN_IF_ERROR(comm->ReduceScatter(in, out, ReduceOp::kSum));
    ZS_ASSIGN_OR_RETURN(std::vector<float> got, out.ToVector<float>());
    for (int64_t i = 0; i < m; ++i) {
      const float want = static_cast<float>(n * (n - 1) / 2 + n * ((r * m + i) % 5));
      if (got[i] != want) {
        return absl::InternalError(absl::StrCat("ReduceScatter element ", i, " is ", got[i],
                                                ", expected ", want));
      }
    }
    ZS_RETURN_IF_ERROR(comm->AllReduce(in, ReduceOp::kMax));
    ZS_ASSIGN_OR_RETURN(got, in.ToVector<float>());
    for (int64_t j = 0; j < n * m; ++j) {
      const float want = static_cast<float>(n - 1 + j % 5);
      if (got[j] != want) {
        return absl::InternalError(absl::StrCat("AllReduce element ", j, " is ", got[j],
                                                ", expected ", want));
      }
    }
    return absl::OkStatus();
  }();
  ExpectAllOk(ExchangeStatuses(status));
}

// Past 256 KiB, 3+ ranks broadcast by scatter + all-gather.
TEST(MpiCommunicatorTest, LargeBroadcast) {
  absl::Status status = [&]() -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto comm, MpiCommunicator::Create(MPI_COMM_WORLD));
    const int n = comm->size(), r = comm->rank();
    for (int root : {0, n - 1}) {
      const int64_t count = 100003;
      std::vector<int32_t> v(count);
      for (int64_t i = 0; i < count; ++i) v[i] = r == root ? static_cast<int32_t>(i * 7 + root) : -1;
      ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<int32_t>(v, {count}));
      ZS_RETURN_IF_ERROR(comm->Broadcast(t, root));
      ZS_ASSIGN_OR_RETURN(std::vector<int32_t> got, t.ToVector<int32_t>());
      for (int64_t i = 0; i < count; ++i) {
        if (got[i] != i * 7 + root) {
          return absl::InternalError(absl::StrCat("root ", root, ": element ", i, " is ", got[i]));
        }
      }
    }
    return absl::OkStatus();
  }();
  ExpectAllOk(ExchangeStatuses(status));
}

TEST(MpiCommunicatorTest, RejectsTinyChunks) {
  EXPECT_THAT(MpiCommunicator::Create(MPI_COMM_WORLD, MpiOptions{.chunk_bytes = 8}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_bytes")));
}

}  // namespace
}  // namespace zeroshard::testing

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    // One report: rank 0 sees every rank's status, so it reports for all.
    ::testing::GTEST_FLAG(output) = "";
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
