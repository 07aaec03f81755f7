/*
 * malloc_debug.h — the C contract of libc_malloc_debug.so.
 *
 * libc (bionic's malloc_common_dynamic, or the glibc front in ffi/front/) dlopens the library,
 * resolves the names below with dlsym, fills a MallocDispatch with the native allocator and calls
 * debug_initialize(). From then on every allocation call of the process goes through the debug_*
 * dispatch entries. See docs/spec/abi.md (#how-libc-loads-the-library,
 * #exports, #mallocdispatch) for the exact rules.
 *
 * This header is usable from C and C++, on bionic (Android, LP64 and ILP32) and on glibc hosts.
 */
#ifndef MALLOC_DEBUG_H
#define MALLOC_DEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#if defined(__BIONIC__) || defined(__GLIBC__)
#include <malloc.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * struct mallinfo as the native allocator returns it (by value).
 *
 * Bionic: ten size_t fields (arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks,
 *         fordblks, keepcost); 80 bytes on LP64, 40 on ILP32.
 * glibc:  the same ten fields, but each is an int (40 bytes). On a glibc host the front fills the
 *         dispatch's mallinfo entry with glibc's own mallinfo, so debug_mallinfo() returns glibc's
 *         struct there: the type below is glibc's struct mallinfo, not bionic's shape.
 * Elsewhere (no bionic or glibc <malloc.h>): bionic's shape is declared here.
 */
#if defined(__BIONIC__) || defined(__GLIBC__)
typedef struct mallinfo MallocDebugMallinfo;
#else
struct mallinfo {
  size_t arena;    /* Non-mmapped space allocated (bytes). */
  size_t ordblks;  /* Number of free chunks. */
  size_t smblks;   /* Number of free fastbin blocks. */
  size_t hblks;    /* Number of mmapped regions. */
  size_t hblkhd;   /* Space allocated in mmapped regions (bytes). */
  size_t usmblks;  /* Maximum total allocated space (bytes). */
  size_t fsmblks;  /* Space in freed fastbin blocks (bytes). */
  size_t uordblks; /* Total allocated space (bytes). */
  size_t fordblks; /* Total free space (bytes). */
  size_t keepcost; /* Top-most, releasable space (bytes). */
};
typedef struct mallinfo MallocDebugMallinfo;
#endif

/* Function-pointer types of the dispatch entries (bionic_malloc_dispatch.h). */
typedef void* (*MallocCalloc)(size_t, size_t);
typedef void (*MallocFree)(void*);
typedef MallocDebugMallinfo (*MallocMallinfo)(void);
typedef void* (*MallocMalloc)(size_t);
typedef int (*MallocMallocInfo)(int, FILE*);
typedef size_t (*MallocMallocUsableSize)(const void*);
typedef void* (*MallocMemalign)(size_t, size_t);
typedef int (*MallocPosixMemalign)(void**, size_t, size_t);
typedef void* (*MallocRealloc)(void*, size_t);
typedef void* (*MallocReallocarray)(void*, size_t, size_t);
typedef void (*MallocIterateCallback)(uintptr_t base, size_t size, void* arg);
typedef int (*MallocIterate)(uintptr_t, size_t, MallocIterateCallback, void*);
typedef void (*MallocMallocDisable)(void);
typedef void (*MallocMallocEnable)(void);
typedef int (*MallocMallopt)(int, int);
typedef void* (*MallocAlignedAlloc)(size_t, size_t);
#if !defined(__LP64__)
typedef void* (*MallocPvalloc)(size_t);
typedef void* (*MallocValloc)(size_t);
#endif

/*
 * The native allocator's entry points. Field order, the ILP32-only pvalloc/valloc slots and the
 * 32-byte alignment are ABI:
 *   LP64:  14 pointers at offsets 0..104, sizeof 128 (padded to the alignment).
 *   ILP32: 16 pointers at offsets 0..60 (pvalloc at 28, valloc at 36), sizeof 64.
 * This is the table of Android 9 to 16. Android 9's ends before malloc_info (that slot is its
 * padding, zero: the library then answers malloc_info with -1/ENOTSUP itself).
 */
typedef struct MallocDispatch {
  MallocCalloc calloc;
  MallocFree free;
  MallocMallinfo mallinfo;
  MallocMalloc malloc;
  MallocMallocUsableSize malloc_usable_size;
  MallocMemalign memalign;
  MallocPosixMemalign posix_memalign;
#if !defined(__LP64__)
  MallocPvalloc pvalloc;
#endif
  MallocRealloc realloc;
#if !defined(__LP64__)
  MallocValloc valloc;
#endif
  MallocIterate malloc_iterate;
  MallocMallocDisable malloc_disable;
  MallocMallocEnable malloc_enable;
  MallocMallopt mallopt;
  MallocAlignedAlloc aligned_alloc;
  MallocMallocInfo malloc_info;
} __attribute__((aligned(32))) MallocDispatch;

/*
 * Android 17's table: the same fields with reallocarray inserted right after realloc, so every
 * later field moves one slot:
 *   LP64:  15 pointers (reallocarray at 64, malloc_info at 112), sizeof 128.
 *   ILP32: 17 pointers (realloc at 32, reallocarray at 36, valloc at 40, malloc_info at 64),
 *          sizeof 96.
 * debug_initialize accepts either table (cast to const MallocDispatch*) and tells them apart at
 * run time: on LP64 by the slot at offset 112, which must be zero in a classic table (it is
 * padding there, zero in every static table), on ILP32 by the device's release (API level 37,
 * or a pre-release build of 36 with a codename other than REL). Pass a zero-initialised or static
 * classic table on LP64.
 */
typedef struct MallocDispatch17 {
  MallocCalloc calloc;
  MallocFree free;
  MallocMallinfo mallinfo;
  MallocMalloc malloc;
  MallocMallocUsableSize malloc_usable_size;
  MallocMemalign memalign;
  MallocPosixMemalign posix_memalign;
#if !defined(__LP64__)
  MallocPvalloc pvalloc;
#endif
  MallocRealloc realloc;
  MallocReallocarray reallocarray;
#if !defined(__LP64__)
  MallocValloc valloc;
#endif
  MallocIterate malloc_iterate;
  MallocMallocDisable malloc_disable;
  MallocMallocEnable malloc_enable;
  MallocMallopt mallopt;
  MallocAlignedAlloc aligned_alloc;
  MallocMallocInfo malloc_info;
} __attribute__((aligned(32))) MallocDispatch17;

/*
 * One record of the buffer debug_get_malloc_leak_info() returns (native-endian, packed, no
 * padding; every field is pointer-sized). The buffer holds overall_size / info_size records of
 * info_size = 2 * sizeof(size_t) + sizeof(uintptr_t) * backtrace_size bytes each:
 *   size             allocation size; bit 31 (0x80000000, on LP64 too) set when the allocation
 *                    was made in a zygote child;
 *   num_allocations  how many live allocations share this size and backtrace;
 *   frames           backtrace_size absolute PCs, innermost first; unused slots are 0, and a
 *                    record without a backtrace has frames[0] == 0.
 * Because backtrace_size is only known at run time, walk the buffer in steps of info_size, not
 * sizeof(MallocDebugLeakRecord).
 */
typedef struct MallocDebugLeakRecord {
  size_t size;
  size_t num_allocations;
  uintptr_t frames[];
} MallocDebugLeakRecord;

/* Bit of MallocDebugLeakRecord.size marking an allocation made in a zygote child. */
#define MALLOC_DEBUG_ZYGOTE_CHILD_ALLOCATION ((size_t)1U << 31)

/*
 * android_mallopt(M_GET_MALLOC_LEAK_INFO / M_FREE_MALLOC_LEAK_INFO) argument
 * (bionic platform/bionic/malloc.h). LP64: 40 bytes; ILP32: 20 bytes.
 * Code that also includes bionic's platform header defines MALLOC_DEBUG_NO_ANDROID_MALLOPT_TYPES
 * first to avoid the duplicate typedef.
 */
#if !defined(MALLOC_DEBUG_NO_ANDROID_MALLOPT_TYPES)
typedef struct {
  uint8_t* buffer;
  size_t overall_size;
  size_t info_size;
  size_t total_memory;
  size_t backtrace_size;
} android_mallopt_leak_info_t;
#endif

/* android_mallopt opcodes that concern malloc debug (bionic platform/bionic/malloc.h). */
#define MALLOC_DEBUG_M_SET_ZYGOTE_CHILD 4
#define MALLOC_DEBUG_M_WRITE_MALLOC_LEAK_INFO_TO_FILE 5
#define MALLOC_DEBUG_M_GET_MALLOC_LEAK_INFO 6
#define MALLOC_DEBUG_M_FREE_MALLOC_LEAK_INFO 7

/* mallopt parameters malloc debug passes through or issues itself. */
#define MALLOC_DEBUG_M_DECAY_TIME (-100)
#define MALLOC_DEBUG_M_PURGE (-101)
#define MALLOC_DEBUG_M_PURGE_ALL (-104)
#define MALLOC_DEBUG_M_LOG_STATS (-205)

/* ---- Control functions (libc resolves these first, in this order) ---- */

/* Sets the library up. malloc_dispatch is a MallocDispatch or (cast) a MallocDispatch17; it and
 * zygote_child must stay valid for the process lifetime;
 * options is copied (it may live on libc's stack). Returns false (and logs why) on failure. */
bool debug_initialize(const MallocDispatch* malloc_dispatch, bool* zygote_child,
                      const char* options);
/* Exit-time work (leak report, free-track verification, exit dumps). Later calls are no-ops. */
void debug_finalize(void);
/* Leak report for DDMS / am dumpheap: see MallocDebugLeakRecord. The buffer comes from the
 * native allocator: release it with debug_free_malloc_leak_info, never with free. */
void debug_get_malloc_leak_info(uint8_t** info, size_t* overall_size, size_t* info_size,
                                size_t* total_memory, size_t* backtrace_size);
void debug_free_malloc_leak_info(uint8_t* info);
/* Copies up to max_frames frames of the allocation's backtrace; returns how many (0 if none). */
ssize_t debug_malloc_backtrace(void* pointer, uintptr_t* frames, size_t max_frames);
/* Writes the v1.2 text heap dump to fileno(fp); false when backtraces are not enabled. */
bool debug_write_malloc_leak_info(FILE* fp);

/* Writes the v1.2 text heap dump to a new file (not looked up by libc). */
void debug_dump_heap(const char* file_name);

/* ---- Dispatch entries (libc resolves these second, in MallocDispatch-filling order:
 *      free calloc mallinfo mallopt malloc malloc_info malloc_usable_size memalign
 *      posix_memalign aligned_alloc realloc malloc_iterate malloc_disable malloc_enable
 *      [pvalloc valloc on ILP32]; Android 17 also reallocarray) ---- */

void* debug_malloc(size_t size);
void debug_free(void* pointer);
void* debug_calloc(size_t nmemb, size_t bytes);
void* debug_realloc(void* pointer, size_t bytes);
/* Android 17 (libc requires the name there; older libcs never look it up): ENOMEM and NULL when
 * nmemb * size overflows, else debug_realloc(pointer, nmemb * size). */
void* debug_reallocarray(void* pointer, size_t nmemb, size_t size);
void* debug_memalign(size_t alignment, size_t bytes);
int debug_posix_memalign(void** memptr, size_t alignment, size_t size);
void* debug_aligned_alloc(size_t alignment, size_t size);
size_t debug_malloc_usable_size(void* pointer);
MallocDebugMallinfo debug_mallinfo(void);
int debug_mallopt(int param, int value);
int debug_malloc_info(int options, FILE* fp);
int debug_malloc_iterate(uintptr_t base, size_t size,
                         void (*callback)(uintptr_t base, size_t size, void* arg), void* arg);
void debug_malloc_disable(void);
void debug_malloc_enable(void);
#if !defined(__LP64__)
void* debug_pvalloc(size_t bytes);
void* debug_valloc(size_t size);
#endif

/* Android 9 (P) looks up this name instead of debug_malloc_iterate; same function. */
int debug_iterate(uintptr_t base, size_t size,
                  void (*callback)(uintptr_t base, size_t size, void* arg), void* arg);

#ifdef __cplusplus
}
#endif

#endif /* MALLOC_DEBUG_H */
