#ifndef CJEMALLOC_H
#define CJEMALLOC_H
// Nothing to import: this target only links jemalloc into the worker and holds its settings
// (jemalloc-settings.c). ServiceKit's `Allocator` finds jemalloc at run time.
#endif
