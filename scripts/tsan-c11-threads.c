// C11 threads on POSIX threads, for `scripts/sanitize thread` only (preloaded into the test process).
//
// librdkafka starts its threads with C11 `thrd_create` and guards its queues with `mtx_*` and
// `cnd_*`. glibc implements those without going through the `pthread_*` symbols, so
// ThreadSanitizer (which intercepts `pthread_create`, `pthread_mutex_lock` and friends) never sees
// librdkafka's threads start or its locks taken: the first `malloc` on such a thread crashes the
// sanitizer's allocator, and every hand-off through a librdkafka queue would look like a race.
// Defined here on the `pthread_*` functions, which the process's ThreadSanitizer intercepts, they
// are what the dynamic linker binds librdkafka's calls to when this file's library is preloaded.
// glibc's own functions do the same thing, so librdkafka behaves as it does in production.
// Checked with a small C program whose librdkafka log callback adds to a global the main thread
// also adds to: with this library preloaded ThreadSanitizer reports the race, without it nothing.

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "mtx_t is glibc's pthread_mutex_t");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t), "cnd_t is glibc's pthread_cond_t");
_Static_assert(sizeof(thrd_t) == sizeof(pthread_t), "thrd_t is glibc's pthread_t");

static int result(int error) {
    switch (error) {
    case 0: return thrd_success;
    case ENOMEM: return thrd_nomem;
    case EBUSY: return thrd_busy;
    case ETIMEDOUT: return thrd_timedout;
    default: return thrd_error;
    }
}

// A C11 thread's function returns an int; a POSIX thread's a pointer. The int travels in the
// pointer, as in glibc, through a start record that lives until the thread has read it.
struct start {
    thrd_start_t function;
    void *argument;
};

static void *run(void *record) {
    struct start start = *(struct start *)record;
    free(record);
    return (void *)(intptr_t)start.function(start.argument);
}

int thrd_create(thrd_t *thread, thrd_start_t function, void *argument) {
    struct start *record = malloc(sizeof *record);
    if (record == NULL) return thrd_nomem;
    record->function = function;
    record->argument = argument;
    int error = pthread_create((pthread_t *)thread, NULL, run, record);
    if (error != 0) free(record);
    return result(error);
}

int thrd_join(thrd_t thread, int *status) {
    void *value = NULL;
    int error = pthread_join((pthread_t)thread, &value);
    if (error == 0 && status != NULL) *status = (int)(intptr_t)value;
    return result(error);
}

int thrd_detach(thrd_t thread) { return result(pthread_detach((pthread_t)thread)); }

thrd_t thrd_current(void) { return (thrd_t)pthread_self(); }

int mtx_init(mtx_t *mutex, int type) {
    pthread_mutexattr_t attributes;
    if (pthread_mutexattr_init(&attributes) != 0) return thrd_error;
    if ((type & mtx_recursive) != 0) pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_RECURSIVE);
    int error = pthread_mutex_init((pthread_mutex_t *)mutex, &attributes);
    pthread_mutexattr_destroy(&attributes);
    return result(error);
}

int mtx_lock(mtx_t *mutex) { return result(pthread_mutex_lock((pthread_mutex_t *)mutex)); }

int mtx_trylock(mtx_t *mutex) { return result(pthread_mutex_trylock((pthread_mutex_t *)mutex)); }

int mtx_timedlock(mtx_t *restrict mutex, const struct timespec *restrict deadline) {
    return result(pthread_mutex_timedlock((pthread_mutex_t *)mutex, deadline));
}

int mtx_unlock(mtx_t *mutex) { return result(pthread_mutex_unlock((pthread_mutex_t *)mutex)); }

void mtx_destroy(mtx_t *mutex) { pthread_mutex_destroy((pthread_mutex_t *)mutex); }

int cnd_init(cnd_t *condition) { return result(pthread_cond_init((pthread_cond_t *)condition, NULL)); }

int cnd_signal(cnd_t *condition) { return result(pthread_cond_signal((pthread_cond_t *)condition)); }

int cnd_broadcast(cnd_t *condition) { return result(pthread_cond_broadcast((pthread_cond_t *)condition)); }

int cnd_wait(cnd_t *condition, mtx_t *mutex) {
    return result(pthread_cond_wait((pthread_cond_t *)condition, (pthread_mutex_t *)mutex));
}

// C11's deadline is on CLOCK_REALTIME, as pthread_cond_timedwait's is by default.
int cnd_timedwait(cnd_t *restrict condition, mtx_t *restrict mutex, const struct timespec *restrict deadline) {
    return result(pthread_cond_timedwait((pthread_cond_t *)condition, (pthread_mutex_t *)mutex, deadline));
}

void cnd_destroy(cnd_t *condition) { pthread_cond_destroy((pthread_cond_t *)condition); }
