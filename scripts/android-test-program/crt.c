/* Start stub for a bionic executable built without an NDK (replaces crtbegin_dynamic.o).
 * _start hands the initial stack pointer (argc, argv, envp, auxv) to __libc_init, exactly as
 * bionic's own crtbegin.c does. No bionic headers exist here: prototypes are declared by hand. */

typedef struct {
  void (**preinit_array)(void);
  void (**init_array)(void);
  void (**fini_array)(void);
} structors_array_t;

extern int main(int argc, char** argv, char** envp);
extern void __libc_init(void* raw_args, void (*onexit)(void),
                        int (*slingshot)(int, char**, char**),
                        structors_array_t const* const structors)
    __attribute__((noreturn));

/* The executable's own DSO handle (atexit/__cxa_atexit registrations refer to it). */
__attribute__((visibility("hidden"))) void* __dso_handle = &__dso_handle;

/* No preinit/init/fini arrays: the test program has no constructors or destructors. */
static const structors_array_t structors = {0, 0, 0};

__attribute__((used, noreturn)) static void start_c(void* raw_args) {
  __libc_init(raw_args, 0, &main, &structors);
}

#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl _start\n"
    ".type _start, %function\n"
    "_start:\n"
    "  xor %rbp, %rbp\n"
    "  mov %rsp, %rdi\n"
    "  and $-16, %rsp\n"
    "  call start_c\n"
    "  hlt\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl _start\n"
    ".type _start, %function\n"
    "_start:\n"
    "  mov x29, #0\n"
    "  mov x30, #0\n"
    "  mov x0, sp\n"
    "  b start_c\n");
#elif defined(__i386__)
/* cdecl: the argument goes on a 16-byte aligned stack. */
__asm__(
    ".text\n"
    ".globl _start\n"
    ".type _start, %function\n"
    "_start:\n"
    "  xor %ebp, %ebp\n"
    "  mov %esp, %eax\n"
    "  and $-16, %esp\n"
    "  sub $12, %esp\n"
    "  push %eax\n"
    "  call start_c\n"
    "  hlt\n");
#elif defined(__arm__)
/* AAPCS: the argument goes in r0. fp (r11; r7 in Thumb code) and lr are cleared so that a frame
 * walk ends here. The instructions assemble the same in ARM and (unified syntax) Thumb-2 state;
 * .thumb_func gives the entry point the Thumb bit when the file is built with -mthumb. */
__asm__(
    ".text\n"
    ".globl _start\n"
    ".type _start, %function\n"
#if defined(__thumb__)
    ".thumb_func\n"
#endif
    "_start:\n"
    "  mov r11, #0\n"
    "  mov r7, #0\n"
    "  mov lr, #0\n"
    "  mov r0, sp\n"
    "  b start_c\n");
#else
#error "unsupported architecture"
#endif
