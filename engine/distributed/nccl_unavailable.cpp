// engine/distributed/nccl_unavailable.cpp: connect_nccl in a build without
// NCCL's header: says so (engine/device/nccl_none.cpp words it).
#include "engine/device/nccl_api.h"
#include "engine/distributed/communicator.h"

namespace xrun::dist {

std::unique_ptr<Communicator> connect_nccl(const RankInfo&, int) { throw CommError(nccl_library()); }

}  // namespace xrun::dist
