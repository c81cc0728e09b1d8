/* rep_movsb: K times, copy L bytes (L <= 32768) from one half of a buffer to the other with rep movsb.
 * User instructions retired: 7K + 4 (a rep-prefixed instruction retires once, as hardware counts it).
 * rep iterations as valgrind exp-bbv reports them ("Total reps"): K(L + 1). */
    .globl _start
    .bss
buffer: .skip 65536
    .text
_start:
    mov $K, %rbx
1:  lea buffer(%rip), %rsi
    lea buffer+32768(%rip), %rdi
    mov $L, %rcx
    cld
    rep movsb
    dec %rbx
    jnz 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
