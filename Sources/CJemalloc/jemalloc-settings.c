// The worker's allocator settings, read by jemalloc when it starts (its documented `malloc_conf`
// global; MALLOC_CONF in the environment is read after it and wins).
//
// tcache_max: the thread caches keep freed blocks up to 256 KiB (the default is 32 KiB).
// librdkafka's producer callocs and frees an LZ4 compression context of about 100 KiB for every
// message set, and under light load every answer is a message set of its own. Beyond the thread
// cache, jemalloc zeroes a reused block for calloc by handing its pages back to the kernel
// (madvise) and faults them in again: about one madvise a login at 1,000 guest logins/s, and
// 24,000 page faults in a run of 10,000 paced logins against 2,300 on glibc. From the thread
// cache, the block is reused and zeroed in place (3,500).
//
// oversize_threshold:0: no arena of its own for blocks over 8 MiB, which jemalloc hands back to
// the kernel as soon as they are freed. An Argon2id hash takes 19 MiB (the default parameters),
// so each password hash faulted its 4,864 pages in afresh: 49 hashes/s against 75 on the same
// machine. In the ordinary arenas a freed block waits out the decay (10 s) and the next hash
// reuses it. The worker's hashing threads allocate from arenas of their own
// (`Allocator.useArenaOfItsOwn`), and this setting is what keeps those arenas from handing the
// block back too: every arena purges a freed block over the threshold at once, and with the
// 8 MiB default a thread on an arena of its own faults every round as well (checked).
const char *malloc_conf = "tcache_max:262144,oversize_threshold:0";
