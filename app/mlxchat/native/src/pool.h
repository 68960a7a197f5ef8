// A persistent pool of worker threads for the kernels: no thread is spawned
// per call, and no thread spins at a barrier (sleep on a condition variable;
// a busy two-core machine would starve a spinner's peers).
#pragma once

#include <functional>

namespace mlxchat {

// Threads a job may use (the caller counts as one): the cores this process
// may run on, or MLXCHAT_KERNEL_THREADS.
int pool_threads();

// Run job(i, n) for i in [0, n) with n = min(parts, pool_threads()): part 0 on
// the calling thread, the others on the pool; returns when all are done.
void parallel_for(int parts, const std::function<void(int, int)>& job);

}  // namespace mlxchat
