// The worker's allocator settings, read by jemalloc when it starts (its documented `malloc_conf`
// global; MALLOC_CONF in the environment is read after it and wins).
//
// tcache_max: the thread caches keep freed blocks up to 256 KiB (the default is 32 KiB).
// librdkafka's producer callocs and frees an LZ4 compression context of about 100 KiB for every
// message set, and under light load every answer is a message set of its own. Beyond the thread
// cache, jemalloc zeroes a reused block for calloc by handing its pages back to the kernel
// (madvise) and faults them in again: one madvise and about 10 page faults a login at 1,000
// guest logins/s. From the thread cache, the block is reused and zeroed in place.
const char *malloc_conf = "tcache_max:262144";
