// kappa/dist/communicator.hpp - the MPI collectives kappa's tensor
// parallelism uses, on a communicator (MPI_COMM_WORLD by default), with the
// bytes each rank hands to them counted.
//
// Part of kappa::dist, the optional MPI layer (CMake target kappa::dist,
// which links Open MPI); nothing else in kappa includes it.
//
//   kappa::dist::Environment env(argc, argv);       // MPI_Init / MPI_Finalize
//   const kappa::dist::Communicator& comm = kappa::dist::Communicator::world();
//   comm.allreduce_sum(y.data(), y.size());          // y <- sum over ranks of y
//
// An MPI call that fails throws kappa::dist::MpiError naming the call and
// MPI's message (the communicator's error handler is set to return codes).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kappa::dist {

/// An MPI call failed: names the call and MPI's error string.
class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw MpiError(std::string("kappa: dist: ") + call +
                 " failed: " + std::string(msg, static_cast<std::size_t>(len)));
}
template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return MPI_UINT64_T;
  else
    static_assert(!sizeof(T), "kappa: dist: no MPI datatype for this type");
}
}  // namespace detail

/// MPI_Init (with thread support MPI_THREAD_FUNNELED: OpenMP threads inside
/// a rank, MPI calls from its main thread) and MPI_Finalize, once per
/// process; a no-op if MPI was initialized already.
class Environment {
 public:
  Environment(int& argc, char**& argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    detail::check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owner_ = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && !finalized) MPI_Finalize();
  }

 private:
  bool owner_ = false;
};

/// A communicator's rank, size and the collectives of tensor parallelism.
/// Counts the payload bytes this rank hands to each kind of collective (what
/// the algorithm then moves on the wire depends on it: a ring allreduce of n
/// bytes sends 2 (P - 1) / P n per rank).
class Communicator {
 public:
  explicit Communicator(MPI_Comm comm) : comm_(comm) {
    detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  /// MPI_COMM_WORLD (after MPI_Init: construct an Environment first).
  static const Communicator& world() {
    static const Communicator w(MPI_COMM_WORLD);
    return w;
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm handle() const noexcept { return comm_; }

  /// x[0..n) <- the elementwise sum of every rank's x (in place).
  template <class T>
  void allreduce_sum(T* x, std::size_t n) const {
    if (size_ == 1 || n == 0) return;
    detail::check(
        MPI_Allreduce(MPI_IN_PLACE, x, checked_count(n), detail::datatype<T>(), MPI_SUM, comm_),
        "MPI_Allreduce");
    allreduce_bytes_ += n * sizeof(T);
    ++allreduce_calls_;
  }
  /// x[0..n) <- root's x[0..n).
  template <class T>
  void broadcast(T* x, std::size_t n, int root = 0) const {
    if (size_ == 1 || n == 0) return;
    detail::check(MPI_Bcast(x, checked_count(n), detail::datatype<T>(), root, comm_), "MPI_Bcast");
    broadcast_bytes_ += n * sizeof(T);
  }
  /// Every rank's block of `counts[rank]` elements, one after another in rank
  /// order, into `all` (sum of counts elements) on every rank.
  template <class T>
  void allgather(const T* mine, T* all, const std::vector<int>& counts) const {
    std::vector<int> displs(counts.size(), 0);
    for (std::size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
    const int n = counts[static_cast<std::size_t>(rank_)];
    if (size_ == 1) {
      std::copy(mine, mine + n, all);
      return;
    }
    detail::check(MPI_Allgatherv(mine, n, detail::datatype<T>(), all, counts.data(), displs.data(),
                                 detail::datatype<T>(), comm_),
                  "MPI_Allgatherv");
    allgather_bytes_ += static_cast<std::size_t>(n) * sizeof(T);
  }
  /// The maximum of v over the ranks.
  template <class T>
  [[nodiscard]] T max(T v) const {
    if (size_ == 1) return v;
    detail::check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, detail::datatype<T>(), MPI_MAX, comm_),
                  "MPI_Allreduce");
    return v;
  }
  /// The sum of v over the ranks.
  template <class T>
  [[nodiscard]] T sum(T v) const {
    if (size_ == 1) return v;
    detail::check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, detail::datatype<T>(), MPI_SUM, comm_),
                  "MPI_Allreduce");
    return v;
  }
  void barrier() const { detail::check(MPI_Barrier(comm_), "MPI_Barrier"); }

  /// Payload bytes this rank passed to allreduce_sum / broadcast so far.
  [[nodiscard]] std::uint64_t allreduce_bytes() const noexcept { return allreduce_bytes_; }
  [[nodiscard]] std::uint64_t allreduce_calls() const noexcept { return allreduce_calls_; }
  [[nodiscard]] std::uint64_t broadcast_bytes() const noexcept { return broadcast_bytes_; }
  /// Payload bytes this rank contributed to allgather so far (its block).
  [[nodiscard]] std::uint64_t allgather_bytes() const noexcept { return allgather_bytes_; }
  void reset_counters() const noexcept {
    allreduce_bytes_ = 0;
    allreduce_calls_ = 0;
    broadcast_bytes_ = 0;
    allgather_bytes_ = 0;
  }

 private:
  static int checked_count(std::size_t n) {
    if (n > static_cast<std::size_t>(INT32_MAX))
      throw std::length_error("kappa: dist: a collective of " + std::to_string(n) +
                              " elements exceeds MPI's int count");
    return static_cast<int>(n);
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  mutable std::atomic<std::uint64_t> allreduce_bytes_{0}, allreduce_calls_{0}, broadcast_bytes_{0},
      allgather_bytes_{0};
};

}  // namespace kappa::dist
