/* version.c - library version, ABI version and the hash of the public header
 * it was built from (checked by the bindings against the generated cdef). */
#include "tbrt.h"
#include "tbrt_header_hash.h"

int tbrt_abi_version(void) { return TBRT_ABI_VERSION; }
const char *tbrt_version(void) { return "0.1.0"; }
const char *tbrt_header_hash(void) { return TBRT_HEADER_HASH; }
