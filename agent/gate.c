/* perfctl's exec gate: a static program without libc that blocks until perfctl releases it, then execs
 * the benchmark in place (same pid), so counters attached with enable_on_exec start at the benchmark's
 * own exec.
 *
 *   gate [-u UID] [-g GID] [-G GID,GID...] [-A CPU,CPU...] [-C DIR] [-J FD] [-T FD] [-L FD] --
 *        /abs/path/to/benchmark ARGS...
 *   (stdin: the release pipe)
 *
 * It puts every signal's disposition back to the default and unblocks them all, reads one byte from stdin
 * (EOF: perfctl died before releasing; exit 125 without running anything), points stdin at /dev/null, takes
 * the CPUs -A lists (its own are perfctl's: see -L), drops to the given groups, gid and uid (all three of
 * real, effective and saved), changes to DIR, and execve()s the benchmark with the environment it was given.
 * With -T, FD gets CLOCK_MONOTONIC (8 bytes, native order) right before the execve: where the run's wall time starts,
 * so that it leaves out the gate's steps, above all the move into the cgroup, which waits for an RCU grace period
 * whenever no move came within the last one (6-17 ms here: the first run of every command, and every run of a benchmark
 * longer than that). Counters scoped to the cgroup then also see that clock_gettime and that write (a microsecond or
 * two of task-clock, no fault: the page it is written from is touched at start).
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
 * With -L FD the gate loops (agent/runner.py LoopedGate): it starts a child (spawn_child: sharing the
 * loop's memory until its execve) that waits for the next byte on stdin itself, then does all of the above
 * and execs the benchmark; the loop waits for it, writes a record (struct record) to FD and starts the next
 * child; a child that reads EOF exits and the loop ends (exit 0). A child that stops (SIGSTOP, SIGTSTP...)
 * is reported by a record of kind STOPPED with the signal, and waited for again. perfctl then starts runs
 * by writing one byte rather than by spawning a process from Python (~0.3 ms a run on these VMs, with the
 * gate's own exec). The child is started before its release, as perf stat starts its own, so the release
 * wakes it directly rather than the loop, which would then start it. perfctl pins its own thread to one
 * CPU before it spawns the loop, which inherits that CPU, and so do its children until they take the CPUs
 * of -A: perfctl, the loop and the run until its release share one CPU, and no wake-up between them
 * crosses CPUs (each one that did cost ~20 us of an IPI on these VMs, whose idle CPUs halt; ~0.1 ms a run
 * in all, bench/stat_rate.py). The child waits as SCHED_BATCH (child_main), so that perfctl goes to sleep
 * before the released benchmark starts on that CPU. The loop points its own stdin at /dev/null once (it reads nothing
 * but keeps the release pipe as a copy its children read), so its children need not. Counting is unchanged: the child
 * joins the cgroup as its last step before execve, as the single-run gate does. It is not started inside the cgroup
 * (clone3's CLONE_INTO_CGROUP, ~50 us a run faster here): a child started on the loop's CPU is switched out for the
 * loop before its execve as often as not, and from inside the cgroup that switch was counted as the benchmark's
 * (context-switches of /bin/true pinned to one CPU: mean 0.7 a run, against 0.07 moved in).
 */
#include <asm/unistd.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <linux/sched/types.h>
#include <linux/time.h>

#define MAX_GROUPS 256
#define MAX_CPUS 1024

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

static void __attribute__((noreturn)) fail(long status, const char *message) {
    say("perfctl-gate: ");
    say(message);
    say("\n");
    leave(status);
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

/* What the loop (-L FD) writes to FD after each run (and at each stop); agent/runner.py LOOP_RECORD. */
struct record {
    long kind; /* 0 EXITED, 1 STOPPED */
    long pid;
    long code;        /* waitid's si_code: CLD_EXITED, CLD_KILLED, CLD_DUMPED, CLD_STOPPED, CLD_TRAPPED */
    long status;      /* waitid's si_status: the exit status or the signal */
    long max_rss_kib; /* ru_maxrss */
    long start_ns;    /* CLOCK_MONOTONIC at the benchmark's execve (at its release if it never got there) */
    long end_ns;      /* CLOCK_MONOTONIC when wait4 returned */
};

struct kernel_rusage { /* struct rusage as the kernel writes it: two timevals, then 14 longs */
    long utime[2], stime[2], maxrss, rest[13];
};

static long monotonic_ns(void) {
    struct timespec now;
    syscall3(__NR_clock_gettime, CLOCK_MONOTONIC, (long)&now, 0);
    return now.tv_sec * 1000000000L + now.tv_nsec;
}

static long syscall5(long number, long a, long b, long c, long d, long e) {
    long result;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return result;
}

struct kernel_sigaction { /* rt_sigaction's, on x86-64 */
    unsigned long handler, flags, restorer, mask;
};

struct child_info { /* the start of siginfo_t for SIGCHLD on x86-64 */
    int signo, error, code, pad;
    int pid, uid, status;
    int rest[25];
};

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

/* The number at *at in a comma-separated list (-G, -A); *at moves past it and its comma. */
static long list_item(const char **at) {
    long value = number(*at, at);
    if (**at == ',')
        (*at)++;
    return value;
}

static void __attribute__((noreturn)) run(char **command, char **envp, long group_count, unsigned int *groups,
                                          long gid, long uid, const char *directory, long join);

/* The loop's child shares the loop's memory until its execve: clone(CLONE_VM) on a stack of its own, so
 * nothing is copied (a fork copied the loop's page tables and faulted its pages back in: a loop of
 * /bin/true took 612 us a run with fork, 587 us with this, medians of 10 rounds on these VMs). Not a vfork
 * (CLONE_VFORK), which posix_spawn is: its parent is woken at the child's execve, on the benchmark's CPU as
 * often as not, and switched the benchmark out right after it had joined the cgroup (context-switches of
 * /bin/true: mean 0.05 a run with fork, 0.23 with vfork, 0.06 with this). The loop goes on to wait for
 * the exit meanwhile and touches nothing the child reads: the child runs run() on child_stack with what is
 * in child (set before each run, while no child runs). */
struct child_args {
    char **command, **envp;
    long group_count;
    unsigned int *groups;
    long gid, uid;
    const char *directory;
    long join;
};
static struct child_args child;
static int stdin_ready; /* the loop made stdin /dev/null for its children */
static long timing = -1;    /* -T FD */
static volatile long exec_ns; /* set by run() right before the execve: the loop's child writes the loop's memory */
static struct timespec exec_time;
static unsigned long cpus[MAX_CPUS / 64]; /* -A: the CPUs the benchmark may run on */
static int cpus_given;
static long release_fd = -1;           /* the loop's copy of the release pipe: its children read it */
static volatile long released_ns;      /* set by the loop's child when it read its release */
/* The child reads its release into this byte of the memory it shares with the loop, cleared before each
 * child starts: the kernel has copied the byte before a kill can end the read, so the loop knows whether a
 * child that died took its release with it (a kill between the read and released_ns, the loop waiting for
 * a release that had already come: a hang). perfctl's release byte is never 0. */
static volatile char release_taken;
static char child_stack[16384] __attribute__((aligned(16)));
static long loop_policy;                 /* the loop's scheduling, which its children run with once released */
static struct sched_param loop_priority;

static void __attribute__((noreturn, used)) child_main(void) {
    /* It waits as SCHED_BATCH, which never preempts at its wake-up: released, it runs once perfctl, which
     * released it on this CPU, has gone to sleep, rather than preempting perfctl and then starting the
     * benchmark beside it, where the execve's balancing moved the benchmark to the other CPU, a migration and
     * a switch counted as the benchmark's. Its scheduling comes back before anything else. */
    struct sched_param batch = {0};
    syscall3(__NR_sched_setscheduler, 0, SCHED_BATCH, (long)&batch);
    if (syscall3(__NR_read, release_fd, (long)&release_taken, 1) != 1)
        leave(125);
    released_ns = monotonic_ns();
    long result = syscall3(__NR_sched_setscheduler, 0, loop_policy, (long)&loop_priority);
    if (result < 0)
        fail_errno(126, "cannot restore the scheduling policy", result);
    run(child.command, child.envp, child.group_count, child.groups, child.gid, child.uid, child.directory,
        child.join);
}

/* clone(CLONE_VM | SIGCHLD, stack): in the parent the child's pid (or -errno); the child calls ``entry`` on
 * ``stack`` and never returns. In assembly, since the child must not touch the parent's stack frame: the
 * compiler's code after a raw syscall would. */
long spawn_child(char *stack, void (*entry)(void));
__asm__(".globl spawn_child\n"
        "spawn_child:\n"
        "\tmov %rsi, %r9\n"      /* entry: syscall keeps r9 (it clobbers rcx and r11) */
        "\tmov %rdi, %rsi\n"     /* the child's stack */
        "\tmov $0x111, %edi\n"   /* CLONE_VM 0x100 | SIGCHLD 17 */
        "\txor %edx, %edx\n"
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

void __attribute__((noreturn, used)) gate_main(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    long uid = -1, gid = -1, group_count = -1, join = -1, loop = -1;
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
                groups[group_count++] = (unsigned int)list_item(&end);
            }
        } else if (same(argv[i], "-A")) {
            end = value;
            while (*end) {
                long cpu = list_item(&end);
                if (cpu >= MAX_CPUS)
                    fail(126, "CPU out of range");
                cpus[cpu / 64] |= 1UL << (cpu % 64);
                cpus_given = 1;
            }
        } else if (same(argv[i], "-L")) {
            loop = number(value, &end);
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
    /* Every benchmark starts as a shell would start it: each signal's disposition the default, none blocked.
     * perfctl's are not a benchmark's: Python ignores SIGPIPE and SIGXFSZ, and glibc's posix_spawn, which
     * starts this gate, ignores its own two (32, 33); an ignored signal stays ignored across execve, so
     * `yes | head -1` inside a benchmark printed "Broken pipe" and failed. Handlers cannot survive an execve;
     * the loop's children inherit what is set here. */
    struct kernel_sigaction default_action = {0, 0, 0, 0};
    for (long signal = 1; signal <= 64; signal++)
        if (signal != 9 && signal != 19) /* SIGKILL and SIGSTOP cannot be changed */
            syscall5(__NR_rt_sigaction, signal, (long)&default_action, 0, 8, 0);
    unsigned long no_signals = 0;
    syscall5(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&no_signals, 0, 8, 0);
    /* their pages are touched now, not by run() in the cgroup, where a fault was counted as the benchmark's */
    exec_ns = 0;
    *(volatile long *)&exec_time.tv_sec = 0;
    long result;
    if (join >= 0 && (result = syscall3(__NR_fcntl, join, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(126, "bad cgroup descriptor", result);
    if (timing >= 0 && (result = syscall3(__NR_fcntl, timing, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(126, "bad timing descriptor", result);
    char byte;
    if (loop < 0) {
        if (syscall3(__NR_read, 0, (long)&byte, 1) != 1)
            leave(125);
        run(argv + i, envp, group_count, groups, gid, uid, directory, join);
    }
    if ((result = syscall3(__NR_fcntl, loop, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(126, "bad record descriptor for the loop", result);
    /* the loop reads its releases from a copy of stdin, and stdin becomes /dev/null: each child has it so */
    long releases = syscall3(__NR_fcntl, 0, F_DUPFD_CLOEXEC, 3);
    if (releases < 0)
        fail_errno(126, "cannot keep the release pipe", releases);
    long null = syscall3(__NR_open, (long)"/dev/null", O_RDONLY | O_CLOEXEC, 0);
    if (null < 0 || (result = syscall3(__NR_dup2, null, 0, 0)) < 0)
        fail(126, "cannot open /dev/null");
    syscall3(__NR_close, null, 0, 0);
    stdin_ready = 1;
    loop_policy = syscall3(__NR_sched_getscheduler, 0, 0, 0);
    if (loop_policy < 0 || (result = syscall3(__NR_sched_getparam, 0, (long)&loop_priority, 0)) < 0)
        fail(126, "cannot read the scheduling policy");
    release_fd = releases;
    for (;;) {
        struct record record = {0, 0, 0, 0, 0, 0, 0};
        child = (struct child_args){argv + i, envp, group_count, groups, gid, uid, directory, join};
        exec_ns = 0;
        released_ns = 0;
        release_taken = 0;
        long pid = spawn_child(child_stack + sizeof child_stack, child_main);
        record.pid = pid;
        if (pid < 0) { /* as a child that could not start: perfctl reads exit 126 and this line */
            if (syscall3(__NR_read, releases, (long)&byte, 1) != 1)
                leave(0);
            say("perfctl-gate: clone failed\n");
            record.start_ns = monotonic_ns();
            record.code = 1; /* CLD_EXITED */
            record.status = 126;
        } else {
            struct kernel_rusage usage;
            struct child_info info;
            for (;;) { /* P_PID, WEXITED | WSTOPPED; the kernel's waitid takes a rusage too */
                result = syscall5(__NR_waitid, 1, pid, (long)&info, 4 | 2, (long)&usage);
                if (result == -4 /* EINTR */)
                    continue;
                if (result < 0)
                    fail_errno(126, "waitid failed", result);
                if (info.code == 5 /* CLD_STOPPED */ || info.code == 4 /* CLD_TRAPPED */) { /* say so, wait on */
                    long since = exec_ns ? exec_ns : released_ns;
                    struct record stopped = {1, pid, info.code, info.status, 0, since ? since : monotonic_ns(),
                                             monotonic_ns()};
                    syscall3(__NR_write, loop, (long)&stopped, sizeof stopped);
                    continue;
                }
                break;
            }
            /* A child that ended before it read a release read EOF (perfctl ended the loop), or was killed
             * while it waited (a stop that never ended, a stray kill): the next release, once perfctl writes
             * it, was that child's, and gets this record, so that every release still gets exactly one. */
            if (!release_taken && syscall3(__NR_read, releases, (long)&byte, 1) != 1)
                leave(0);
            record.start_ns = released_ns ? released_ns : monotonic_ns();
            record.code = info.code;
            record.status = info.status;
            record.max_rss_kib = usage.maxrss;
        }
        record.end_ns = monotonic_ns();
        if (exec_ns) /* the wall time starts at the execve, as with -T: the cgroup move is not the benchmark's */
            record.start_ns = exec_ns;
        if (syscall3(__NR_write, loop, (long)&record, sizeof record) != sizeof record)
            leave(1);
    }
    leave(0);
}

static void __attribute__((noreturn)) run(char **command, char **envp, long group_count, unsigned int *groups,
                                          long gid, long uid, const char *directory, long join) {
    long result;
    /* a session of its own, as posix_spawn gives the single-run gate (which it already leads: EPERM) */
    syscall3(__NR_setsid, 0, 0, 0);
    long null = stdin_ready ? -1 : syscall3(__NR_open, (long)"/dev/null", O_RDONLY, 0);
    if (null > 0) {
        syscall3(__NR_dup2, null, 0, 0);
        syscall3(__NR_close, null, 0, 0);
    }
    if (cpus_given && (result = syscall3(__NR_sched_setaffinity, 0, sizeof cpus, (long)cpus)) < 0)
        fail_errno(126, "cannot set the benchmark's CPUs", result);
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
    exec_ns = exec_time.tv_sec * 1000000000L + exec_time.tv_nsec;
    if (timing >= 0)
        syscall3(__NR_write, timing, (long)&exec_ns, sizeof exec_ns);
    result = syscall3(__NR_execve, (long)command[0], (long)command, (long)envp);
    fail_errno(127, "execve failed", result);
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall gate_main\n");
