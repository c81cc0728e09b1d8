/* perfctl's exec gate: a static program without libc that blocks until perfctl releases it, then execs
 * the benchmark in place (same pid), so counters attached with enable_on_exec start at the benchmark's
 * own exec.
 *
 *   gate [-u UID] [-g GID] [-G GID,GID...] [-C DIR] [-J FD] [-T FD] -- /abs/path/to/benchmark ARGS...
 *   (stdin: the release pipe)
 *
 * It reads one byte from stdin (EOF: perfctl died before releasing; exit 125 without running anything),
 * points stdin at /dev/null, drops to the given groups, gid and uid (all three of real, effective and
 * saved), changes to DIR, and execve()s the benchmark with the environment it was given. With -T, FD gets
 * CLOCK_MONOTONIC (8 bytes, native order) right before the execve: where the run's wall time starts, so that
 * it leaves out the gate's steps, above all the move into the cgroup, which waits for an RCU grace period
 * whenever no move came within the last one (6-17 ms here: the first run of every command, and every run of
 * a benchmark longer than that). Counters scoped to the cgroup then also see that clock_gettime and that
 * write (a microsecond or two of task-clock, no fault: the page it is written from is touched at start).
 * With -J, FD is a cgroup's cgroup.procs, opened by perfctl (as root): the gate marks it close-on-exec
 * before anything else and writes "0" to it (moving itself into that cgroup) as its very last step before execve, so
 * counters scoped to the cgroup (agent/perf_event.py, cgroup counting) see nothing of the gate but that
 * write's return and the first half of the execve. A failed move is a failed setup step (126): the
 * benchmark never runs outside the cgroup it is counted and contained in. The kernel checks the move
 * against the credentials of FD's opener, so it works after the drop to --user. Dropping
 * privileges here rather than in a forked Python child lets perfctl start every benchmark with
 * posix_spawn: a fork() in a process holding gRPC threads can crash the child. Exit 126: a setup step
 * failed; 127: execve failed. Either says on stderr what failed and the system's reason: the errno's name
 * and text for the usual ones ("execve failed: EACCES (Permission denied)"), else "errno N", since
 * without libc there is no strerror and a sample's stderr is all the user sees.
 *
 * Built with -DPERFCTL_SPAWNER -shared, the same code is perfctl's in-process spawner (agent/spawn.py):
 * perfctl_spawn() starts the benchmark from perfctl's own process, as a child that shares perfctl's memory
 * until its execve (clone(CLONE_VM) on a stack of its own, as posix_spawn does, without its vfork wait) and
 * takes the gate's steps itself: every signal back to its default and unblocked, a session of its own, its
 * standard descriptors, its CPU, then run() below. That is how `perfctl stat` and `ab` start runs counted by
 * cgroup: no gate process, no exec of the gate, no hop through a pipe. Started from the process that waits
 * for it, the benchmark runs on that process's CPU and wakes it there when it exits, as perf stat's child
 * does: no wake-up crosses CPUs (each one that did cost ~20 us of an IPI on these VMs, whose idle CPUs halt),
 * and the benchmark is not switched out for its parent at its execve (a vfork's parent wakes right then).
 */
#include <asm/unistd.h>
#include <fcntl.h>
#include <linux/time.h>

#define MAX_GROUPS 256

static long syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall" : "=a"(result) : "a"(number), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return result;
}

static void __attribute__((noreturn)) leave(long status) {
    for (;;)
        syscall3(__NR_exit_group, status, 0, 0);
}

static void say(const char *text) {
    long length = 0;
    while (text[length])
        length++;
    syscall3(__NR_write, 2, (long)text, length);
}

/* asm-generic/errno-base.h and errno.h numbers, as x86-64 Linux uses them */
static const struct {
    long number;
    const char *name;
} ERRORS[] = {
    {1, "EPERM (Operation not permitted)"},     {2, "ENOENT (No such file or directory)"},
    {3, "ESRCH (No such process)"},             {9, "EBADF (Bad file descriptor)"},
    {16, "EBUSY (Device or resource busy)"},
    {7, "E2BIG (Argument list too long)"},      {8, "ENOEXEC (Exec format error)"},
    {12, "ENOMEM (Cannot allocate memory)"},    {13, "EACCES (Permission denied)"},
    {20, "ENOTDIR (Not a directory)"},          {21, "EISDIR (Is a directory)"},
    {22, "EINVAL (Invalid argument)"},          {26, "ETXTBSY (Text file busy)"},
    {36, "ENAMETOOLONG (File name too long)"},  {40, "ELOOP (Too many levels of symbolic links)"},
};

/* ``result``: a failed system call's return value, -errno. */
static void __attribute__((noreturn)) fail_errno(long status, const char *message, long result) {
    long error = -result;
    say("perfctl-gate: ");
    say(message);
    say(": ");
    for (unsigned long i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++) {
        if (ERRORS[i].number == error) {
            say(ERRORS[i].name);
            say("\n");
            leave(status);
        }
    }
    char digits[24];
    int at = sizeof digits;
    digits[--at] = 0;
    do {
        digits[--at] = (char)('0' + error % 10);
        error /= 10;
    } while (error > 0 && at > 0);
    say("errno ");
    say(digits + at);
    say("\n");
    leave(status);
}

static void __attribute__((noreturn)) run(char **command, char **envp, long group_count, unsigned int *groups,
                                          long gid, long uid, const char *directory, long join);

static long timing = -1;              /* -T FD */
/* CLOCK_MONOTONIC set by run() right before the execve; the spawner's child writes it in perfctl's memory */
volatile long perfctl_exec_ns;
static struct timespec exec_time;

#ifndef PERFCTL_SPAWNER
static void __attribute__((noreturn)) fail(long status, const char *message) {
    say("perfctl-gate: ");
    say(message);
    say("\n");
    leave(status);
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

/* A decimal id up to 2^32 - 2; *end is where parsing stopped. */
static long number(const char *text, const char **end) {
    long value = 0;
    const char *p = text;
    while (*p >= '0' && *p <= '9') {
        value = value * 10 + (*p - '0');
        if (value > 0xfffffffeL)
            fail(126, "id out of range");
        p++;
    }
    if (p == text)
        fail(126, "expected a number");
    *end = p;
    return value;
}

void __attribute__((noreturn, used)) gate_main(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    long uid = -1, gid = -1, group_count = -1, join = -1;
    unsigned int groups[MAX_GROUPS];
    const char *directory = 0;
    long i = 1;
    while (i < argc && argv[i][0] == '-') {
        if (same(argv[i], "--")) {
            i++;
            break;
        }

        if (i + 1 >= argc)
            fail(126, "option without a value");
        const char *value = argv[i + 1], *end;
        if (same(argv[i], "-u")) {
            uid = number(value, &end);
        } else if (same(argv[i], "-g")) {
            gid = number(value, &end);
        } else if (same(argv[i], "-G")) {
            group_count = 0;
            end = value;
            while (*end) {
                if (group_count == MAX_GROUPS)
                    fail(126, "too many groups");
                groups[group_count++] = (unsigned int)number(end, &end);
                if (*end == ',')
                    end++;
            }
        } else if (same(argv[i], "-T")) {
            timing = number(value, &end);
        } else if (same(argv[i], "-J")) {
            join = number(value, &end);
        } else if (same(argv[i], "-C")) {
            directory = value;
            end = value + 0;
            while (*end)
                end++;
        } else {
            fail(126, "unknown option");
        }
        if (*end)
            fail(126, "malformed option value");
        i += 2;
    }
    if (i >= argc)
        fail(126, "no command");
    /* their pages are touched now, not by run() in the cgroup, where a fault was counted as the benchmark's */
    perfctl_exec_ns = 0;
    *(volatile long *)&exec_time.tv_sec = 0;
    long result;
    if (join >= 0 && (result = syscall3(__NR_fcntl, join, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(126, "bad cgroup descriptor", result);
    if (timing >= 0 && (result = syscall3(__NR_fcntl, timing, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(126, "bad timing descriptor", result);
    char byte;
    if (syscall3(__NR_read, 0, (long)&byte, 1) != 1)
        leave(125);
    /* a session of its own, as posix_spawn gives it (it already leads one: EPERM) */
    syscall3(__NR_setsid, 0, 0, 0);
    long null = syscall3(__NR_open, (long)"/dev/null", O_RDONLY, 0);
    if (null > 0) {
        syscall3(__NR_dup2, null, 0, 0);
        syscall3(__NR_close, null, 0, 0);
    }
    run(argv + i, envp, group_count, groups, gid, uid, directory, join);
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall gate_main\n");
#else
static long syscall4(long number, long a, long b, long c, long d) {
    long result;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(result) : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return result;
}

/* What perfctl_spawn starts (agent/spawn.py SpawnArgs: the same fields in the same order). A descriptor of -1
 * is left as perfctl has it; cpu_mask_bytes 0: no pinning. */
struct spawn_args {
    char **command, **envp;
    long group_count;
    unsigned int *groups;
    long gid, uid;
    const char *directory;
    long join;
    long stdin_fd, stdout_fd, stderr_fd;
    long cpu_mask_bytes;
    unsigned long *cpu_mask;
};

struct kernel_sigaction {
    unsigned long handler, flags, restorer, mask;
};

/* Read by the child after perfctl_spawn has returned: perfctl starts no other spawn until this one's child
 * has exited (agent/spawn.py). */
static struct spawn_args spawning;
static char child_stack[16384] __attribute__((aligned(16)));

static void standard(long fd, long target) {
    long result = fd == target ? syscall3(__NR_fcntl, fd, F_SETFD, 0) : syscall3(__NR_dup2, fd, target, 0);
    if (result < 0)
        fail_errno(126, "cannot set up the standard descriptors", result);
}

static void __attribute__((noreturn, used)) spawned_main(void) {
    /* perfctl's handlers are its own (and in its memory); what it ignores (SIGPIPE, SIGXFSZ) a benchmark does
     * not: every disposition back to the default, then nothing blocked (perfctl_spawn blocked it all) */
    struct kernel_sigaction default_action = {0, 0, 0, 0};
    for (long signal = 1; signal <= 64; signal++)
        if (signal != 9 && signal != 19) /* SIGKILL, SIGSTOP */
            syscall4(__NR_rt_sigaction, signal, (long)&default_action, 0, 8);
    unsigned long none = 0;
    syscall4(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&none, 0, 8);
    syscall3(__NR_setsid, 0, 0, 0);
    if (spawning.stderr_fd >= 0) /* first: the failures below are said on the benchmark's stderr */
        standard(spawning.stderr_fd, 2);
    if (spawning.stdin_fd >= 0)
        standard(spawning.stdin_fd, 0);
    if (spawning.stdout_fd >= 0)
        standard(spawning.stdout_fd, 1);
    long result;
    if (spawning.cpu_mask_bytes &&
        (result = syscall3(__NR_sched_setaffinity, 0, spawning.cpu_mask_bytes, (long)spawning.cpu_mask)) < 0)
        fail_errno(126, "cannot pin to the CPU", result);
    run(spawning.command, spawning.envp, spawning.group_count, spawning.groups, spawning.gid, spawning.uid,
        spawning.directory, spawning.join);
}

/* clone(flags, stack, parent_tid): in the parent the child's pid (or -errno); the child calls ``entry`` on
 * ``stack`` and never returns. In assembly, since the child must not touch the parent's stack frame: the
 * compiler's code after a raw syscall would. */
long spawn_child(char *stack, void (*entry)(void), long flags, int *parent_tid);
__asm__(".globl spawn_child\n"
        ".hidden spawn_child\n"
        "spawn_child:\n"
        "\tmov %rsi, %r9\n"      /* entry: syscall keeps r9 (it clobbers rcx and r11) */
        "\tmov %rdi, %rsi\n"     /* the child's stack */
        "\tmov %rdx, %rdi\n"     /* flags */
        "\tmov %rcx, %rdx\n"     /* parent_tid: where CLONE_PIDFD puts the pidfd */
        "\txor %r10d, %r10d\n"
        "\txor %r8d, %r8d\n"
        "\tmov $56, %eax\n"      /* __NR_clone */
        "\tsyscall\n"
        "\ttest %rax, %rax\n"
        "\tjnz 1f\n"
        "\txor %ebp, %ebp\n"
        "\tcall *%r9\n"          /* the child: entry never returns */
        "\thlt\n"
        "1:\tret\n");

/* Called once after loading: the data the child writes after it joined the cgroup is written now, by
 * perfctl, so that no fault there (counted as the benchmark's) is a first write; agent/spawn.py reads every
 * page of this object's code in too. */
void perfctl_spawner_touch(void) {
    *(volatile long *)&exec_time.tv_sec = 0;
    perfctl_exec_ns = 0;
    for (long at = 0; at < (long)sizeof child_stack; at += 4096)
        *(volatile char *)(child_stack + at) = 0;
}

/* Start ``args``'s benchmark: its pid, or -errno; *pidfd gets a pidfd for it (CLONE_PIDFD). Every signal is
 * blocked in the calling thread meanwhile, so that none reaches the child before it has put back the default
 * dispositions: a handler of perfctl's run in the child would act on perfctl's memory. */
long perfctl_spawn(const struct spawn_args *args, int *pidfd) {
    spawning = *args;
    perfctl_exec_ns = 0;
    unsigned long all = ~0UL, old;
    syscall4(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&all, (long)&old, 8);
    /* CLONE_VM 0x100 | CLONE_PIDFD 0x1000 | SIGCHLD 17 */
    long pid = spawn_child(child_stack + sizeof child_stack, spawned_main, 0x1111, pidfd);
    syscall4(__NR_rt_sigprocmask, 2, (long)&old, 0, 8);
    return pid;
}
#endif

static void __attribute__((noreturn)) run(char **command, char **envp, long group_count, unsigned int *groups,
                                          long gid, long uid, const char *directory, long join) {
    long result;
    if (group_count >= 0 && (result = syscall3(__NR_setgroups, group_count, (long)groups, 0)) < 0)
        fail_errno(126, "setgroups failed", result);
    if (gid >= 0 && (result = syscall3(__NR_setresgid, gid, gid, gid)) < 0)
        fail_errno(126, "setresgid failed", result);
    if (uid >= 0 && (result = syscall3(__NR_setresuid, uid, uid, uid)) < 0)
        fail_errno(126, "setresuid failed", result);
    if (directory && (result = syscall3(__NR_chdir, (long)directory, 0, 0)) < 0)
        fail_errno(126, "cannot change to the working directory", result);
    if (join >= 0 && (result = syscall3(__NR_write, join, (long)"0", 1)) != 1)
        fail_errno(126, "cannot move into the run's cgroup", result);
    /* read into and written from memory touched at start: a first touch here would be a fault in the cgroup */
    syscall3(__NR_clock_gettime, CLOCK_MONOTONIC, (long)&exec_time, 0);
    perfctl_exec_ns = exec_time.tv_sec * 1000000000L + exec_time.tv_nsec;
    if (timing >= 0)
        syscall3(__NR_write, timing, (long)&perfctl_exec_ns, sizeof perfctl_exec_ns);
    result = syscall3(__NR_execve, (long)command[0], (long)command, (long)envp);
    fail_errno(127, "execve failed", result);
}

