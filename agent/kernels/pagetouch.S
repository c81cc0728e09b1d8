/* pagetouch: map P anonymous pages and write one byte to each: P page faults from the touches (plus the
 * ELF's own few at start).
 * User instructions retired: 4P + 13 (mmap call 8, loop setup 2, 4 per page, exit 3). */
    .globl _start
    .text
_start:
    mov $9, %eax            /* mmap(NULL, P*4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) */
    xor %edi, %edi
    mov $(P * 4096), %rsi
    mov $3, %edx
    mov $0x22, %r10d
    mov $-1, %r8
    xor %r9d, %r9d
    syscall
    mov $P, %rcx
    mov %rax, %rdx
1:  movb $1, (%rdx)
    add $4096, %rdx
    dec %rcx
    jnz 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
