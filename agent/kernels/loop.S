/* loop: a counted loop of N iterations (dec; jnz).
 * User instructions retired: 2N + 4 (mov; N x (dec, jnz); mov, xor, syscall). Page faults: the ELF's own. */
    .globl _start
    .text
_start:
    mov $N, %rcx
1:  dec %rcx
    jnz 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
