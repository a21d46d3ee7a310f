// The built-in backends of the registry (collectives/backend_registry.h):
// local, mpi and nccl. Internal to collectives/: the registry calls this once
// when it is first used.
#ifndef ZEROSHARD_COLLECTIVES_BUILTIN_BACKENDS_H_
#define ZEROSHARD_COLLECTIVES_BUILTIN_BACKENDS_H_

namespace zeroshard {

class BackendRegistry;

namespace builtin_backends_internal {

void RegisterBuiltinBackends(BackendRegistry& registry);

}  // namespace builtin_backends_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_COLLECTIVES_BUILTIN_BACKENDS_H_
