/* rep_stosb: K times, fill L bytes with rep stosb (L <= 65536).
 * User instructions retired: 6K + 4 (a rep-prefixed instruction retires once, as hardware counts it).
 * rep iterations as valgrind exp-bbv reports them ("Total reps"): K(L + 1). */
    .globl _start
    .bss
buffer: .skip 65536
    .text
_start:
    mov $K, %rbx
1:  lea buffer(%rip), %rdi
    mov $L, %rcx
    xor %eax, %eax
    rep stosb
    dec %rbx
    jnz 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
