/* The core as it ships to players on Linux (make love-kit) is built with
 * -include of this header. glibc 2.34 moved the thread and dl functions
 * into libc under new symbol versions, so a library linked here would ask
 * for GLIBC_2.34 and fail to load on an older system (Ubuntu 20.04, the
 * Steam runtime's containers). Each is bound to the first version of it
 * instead, which every glibc since keeps, and libpthread.so.0 and
 * libdl.so.2, where glibc before 2.34 defines them, are named as needed:
 * the kit's core then asks for nothing newer than GLIBC_2.17
 * (clock_gettime). For x86-64 and 64-bit ARM Linux with glibc (the kit
 * is built on Debian); anywhere else it does nothing. (No system header
 * here: included first, one would fix the feature macros before the file
 * that includes it sets _GNU_SOURCE.) */
#ifndef SH_GLIBC_COMPAT_H
#define SH_GLIBC_COMPAT_H
#if defined(__linux__) && !defined(__ANDROID__) && defined(__x86_64__)
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.2.5");
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@GLIBC_2.3.3");
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
#elif defined(__linux__) && !defined(__ANDROID__) && defined(__aarch64__)
/* (glibc's first version on 64-bit ARM is 2.17: every function has it) */
__asm__(".symver pthread_create,pthread_create@GLIBC_2.17");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.17");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.17");
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@GLIBC_2.17");
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dladdr,dladdr@GLIBC_2.17");
#endif
#endif
