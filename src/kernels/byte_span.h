// A run of bytes in memory: the weights one matrix product streams, a buffer a read loop measures.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gem4 {

struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

}  // namespace gem4
