/* fldcw: N loads of the x87 control word (counted twice by Pentium 4's instr_retired, once elsewhere).
 * User instructions retired: 3N + 4. fldcw executed: N. */
    .globl _start
    .data
control: .word 0x037f
    .text
_start:
    mov $N, %rcx
1:  fldcw control(%rip)
    dec %rcx
    jnz 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
