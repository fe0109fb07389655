// CHECK for invariants the program itself guarantees. Never for input a client or a file
// controls: those return Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#define INFLIGHT_CHECK(cond)                                                        \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#ifdef NDEBUG
#define INFLIGHT_DCHECK(cond) \
  do {                        \
  } while (0)
#else
#define INFLIGHT_DCHECK(cond) INFLIGHT_CHECK(cond)
#endif
