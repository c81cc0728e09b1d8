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
 * With -L FD the gate loops (agent/run/looped.py LoopedGate): it first writes sizeof(struct record) to FD, which
 * perfctl checks against the layout it reads off this file's struct record (agent/gate.py loop_record), then
 * starts a child (spawn_child: sharing the loop's memory until its execve) that waits for the next byte on stdin
 * itself, then does all of the above and execs the benchmark; the loop waits for it, writes a record (struct
 * record) to FD and starts the next child; a child that reads EOF exits and the loop ends (exit 0). A child that stops (SIGSTOP, SIGTSTP...)
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
#include <asm/errno.h>
#include <asm/siginfo.h>
#include <asm/signal.h>
#include <asm/unistd.h>
#include <fcntl.h>
#include <linux/resource.h>
#include <linux/sched.h>
#include <linux/sched/types.h>
#include <linux/time.h>
#include <linux/wait.h>

#define MAX_GROUPS 256
#define MAX_CPUS 1024
/* The kernel's _NSIG on x86-64: its uapi asm/signal.h has only the old NSIG (32) and an SIGRTMAX that needs
 * _NSIG. rt_sigaction and rt_sigprocmask take the size of the kernel's sigset_t, these 64 bits. */
#define LAST_SIGNAL 64
#define KERNEL_SIGSET_BYTES (LAST_SIGNAL / 8)
/* The gate's own exit statuses, which perfctl reports as the run's */
#define EXIT_NOT_RELEASED 125 /* stdin hit EOF: perfctl ended before the release; nothing ran */
#define EXIT_SETUP_FAILED 126 /* an option or a setup step failed; the benchmark never ran */
#define EXIT_EXEC_FAILED 127  /* the benchmark's execve failed */

/* What the loop (-L FD) writes to FD after each run (and at each stop). THE one definition of the record:
 * agent/gate.py (loop_record) reads the fields and kinds below off this file, so every field is a long, one
 * per line, and the kinds are an enum with explicit values. */
enum record_kind { RECORD_EXITED = 0, RECORD_STOPPED = 1 };
struct record {
    long kind;        /* enum record_kind */
    long pid;
    long code;        /* waitid's si_code: CLD_EXITED, CLD_KILLED, CLD_DUMPED, CLD_STOPPED, CLD_TRAPPED */
    long status;      /* waitid's si_status: the exit status or the signal */
    long max_rss_kib; /* ru_maxrss */
    long start_ns;    /* CLOCK_MONOTONIC at the benchmark's execve (at its release if it never got there) */
    long end_ns;      /* CLOCK_MONOTONIC when waitid returned */
};

static long syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall" : "=a"(result) : "a"(number), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return result;
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

/* Names and texts of the errors a setup step or execve usually meets; without libc there is no strerror */
static const struct {
    long number;
    const char *name;
} ERRORS[] = {
    {EPERM, "EPERM (Operation not permitted)"},      {ENOENT, "ENOENT (No such file or directory)"},
    {ESRCH, "ESRCH (No such process)"},              {EBADF, "EBADF (Bad file descriptor)"},
    {EBUSY, "EBUSY (Device or resource busy)"},
    {E2BIG, "E2BIG (Argument list too long)"},       {ENOEXEC, "ENOEXEC (Exec format error)"},
    {ENOMEM, "ENOMEM (Cannot allocate memory)"},     {EACCES, "EACCES (Permission denied)"},
    {ENOTDIR, "ENOTDIR (Not a directory)"},          {EISDIR, "EISDIR (Is a directory)"},
    {EINVAL, "EINVAL (Invalid argument)"},           {ETXTBSY, "ETXTBSY (Text file busy)"},
    {ENAMETOOLONG, "ENAMETOOLONG (File name too long)"}, {ELOOP, "ELOOP (Too many levels of symbolic links)"},
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

static long monotonic_ns(void) {
    struct timespec now;
    syscall3(__NR_clock_gettime, CLOCK_MONOTONIC, (long)&now, 0);
    return now.tv_sec * 1000000000L + now.tv_nsec;
}

struct kernel_sigaction { /* rt_sigaction's, on x86-64 (asm/signal.h's struct sigaction is the old one) */
    unsigned long handler, flags, restorer, mask;
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
            fail(EXIT_SETUP_FAILED, "id out of range");
        p++;
    }
    if (p == text)
        fail(EXIT_SETUP_FAILED, "expected a number");
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

/* How the benchmark is started: the options, and what run() reads. Written by parse_options before anything
 * runs (its pages are touched then, not by run() in the cgroup, where a fault was counted as the benchmark's),
 * and never written again: the loop's children share it with the loop. */
static struct {
    char **command, **envp;
    long uid, gid, group_count, join, timing, loop; /* -u -g -G (its count) -J -T -L; -1 when not given */
    const char *directory;                          /* -C */
    unsigned int groups[MAX_GROUPS];                /* -G */
    unsigned long cpus[MAX_CPUS / 64];              /* -A: the CPUs the benchmark may run on */
    int cpus_given;
} launch;

static int stdin_ready;       /* the loop made stdin /dev/null for its children */
static volatile long exec_ns; /* set by run() right before the execve: the loop's child writes the loop's memory */
static struct timespec exec_time;
static long release_fd = -1;      /* the loop's copy of the release pipe: its children read it */
static volatile long released_ns; /* set by the loop's child when it read its release */
/* The child reads its release into this byte of the memory it shares with the loop, cleared before each
 * child starts: the kernel has copied the byte before a kill can end the read, so the loop knows whether a
 * child that died took its release with it (a kill between the read and released_ns, the loop waiting for
 * a release that had already come: a hang). perfctl's release byte is never 0. */
static volatile char release_taken;
static char child_stack[16384] __attribute__((aligned(16)));
static long loop_policy; /* the loop's scheduling, which its children run with once released */
static struct sched_param loop_priority;

/* Options up to "--" into launch; the benchmark's argv is what follows. */
static void parse_options(long argc, char **argv) {
    launch.uid = launch.gid = launch.group_count = launch.join = launch.timing = launch.loop = -1;
    launch.directory = 0;
    long i = 1;
    while (i < argc && argv[i][0] == '-') {
        if (same(argv[i], "--")) {
            i++;
            break;
        }
        if (i + 1 >= argc)
            fail(EXIT_SETUP_FAILED, "option without a value");
        const char *value = argv[i + 1], *end = value;
        if (same(argv[i], "-u")) {
            launch.uid = number(value, &end);
        } else if (same(argv[i], "-g")) {
            launch.gid = number(value, &end);
        } else if (same(argv[i], "-G")) {
            launch.group_count = 0;
            while (*end) {
                if (launch.group_count == MAX_GROUPS)
                    fail(EXIT_SETUP_FAILED, "too many groups");
                launch.groups[launch.group_count++] = (unsigned int)list_item(&end);
            }
        } else if (same(argv[i], "-A")) {
            while (*end) {
                long cpu = list_item(&end);
                if (cpu >= MAX_CPUS)
                    fail(EXIT_SETUP_FAILED, "CPU out of range");
                launch.cpus[cpu / 64] |= 1UL << (cpu % 64);
                launch.cpus_given = 1;
            }
        } else if (same(argv[i], "-L")) {
            launch.loop = number(value, &end);
        } else if (same(argv[i], "-T")) {
            launch.timing = number(value, &end);
        } else if (same(argv[i], "-J")) {
            launch.join = number(value, &end);
        } else if (same(argv[i], "-C")) {
            launch.directory = value;
            while (*end)
                end++;
        } else {
            fail(EXIT_SETUP_FAILED, "unknown option");
        }
        if (*end)
            fail(EXIT_SETUP_FAILED, "malformed option value");
        i += 2;
    }
    if (i >= argc)
        fail(EXIT_SETUP_FAILED, "no command");
    launch.command = argv + i;
}

/* Every benchmark starts as a shell would start it: each signal's disposition the default, none blocked.
 * perfctl's are not a benchmark's: Python ignores SIGPIPE and SIGXFSZ, and glibc's posix_spawn, which
 * starts this gate, ignores its own two (32, 33); an ignored signal stays ignored across execve, so
 * `yes | head -1` inside a benchmark printed "Broken pipe" and failed. Handlers cannot survive an execve;
 * the loop's children inherit what is set here. */
static void reset_signals(void) {
    struct kernel_sigaction default_action = {(unsigned long)SIG_DFL, 0, 0, 0};
    for (long signal = 1; signal <= LAST_SIGNAL; signal++)
        if (signal != SIGKILL && signal != SIGSTOP) /* their dispositions cannot be changed */
            syscall5(__NR_rt_sigaction, signal, (long)&default_action, 0, KERNEL_SIGSET_BYTES, 0);
    unsigned long no_signals = 0;
    syscall5(__NR_rt_sigprocmask, SIG_SETMASK, (long)&no_signals, 0, KERNEL_SIGSET_BYTES, 0);
}

/* The benchmark's last steps in the gate, and its execve: run by the single-run gate once released, and by
 * each of the loop's children. */
static void __attribute__((noreturn)) run(void) {
    long result;
    /* a session of its own, as posix_spawn gives the single-run gate (which it already leads: EPERM) */
    syscall3(__NR_setsid, 0, 0, 0);
    long null = stdin_ready ? -1 : syscall3(__NR_open, (long)"/dev/null", O_RDONLY, 0);
    if (null > 0) {
        syscall3(__NR_dup2, null, 0, 0);
        syscall3(__NR_close, null, 0, 0);
    }
    if (launch.cpus_given &&
        (result = syscall3(__NR_sched_setaffinity, 0, sizeof launch.cpus, (long)launch.cpus)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "cannot set the benchmark's CPUs", result);
    if (launch.group_count >= 0 &&
        (result = syscall3(__NR_setgroups, launch.group_count, (long)launch.groups, 0)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "setgroups failed", result);
    if (launch.gid >= 0 && (result = syscall3(__NR_setresgid, launch.gid, launch.gid, launch.gid)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "setresgid failed", result);
    if (launch.uid >= 0 && (result = syscall3(__NR_setresuid, launch.uid, launch.uid, launch.uid)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "setresuid failed", result);
    if (launch.directory && (result = syscall3(__NR_chdir, (long)launch.directory, 0, 0)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "cannot change to the working directory", result);
    if (launch.join >= 0 && (result = syscall3(__NR_write, launch.join, (long)"0", 1)) != 1)
        fail_errno(EXIT_SETUP_FAILED, "cannot move into the run's cgroup", result);
    /* read into and written from memory touched at start: a first touch here would be a fault in the cgroup */
    syscall3(__NR_clock_gettime, CLOCK_MONOTONIC, (long)&exec_time, 0);
    exec_ns = exec_time.tv_sec * 1000000000L + exec_time.tv_nsec;
    if (launch.timing >= 0)
        syscall3(__NR_write, launch.timing, (long)&exec_ns, sizeof exec_ns);
    result = syscall3(__NR_execve, (long)launch.command[0], (long)launch.command, (long)launch.envp);
    fail_errno(EXIT_EXEC_FAILED, "execve failed", result);
}

/* The loop's child shares the loop's memory until its execve: clone(CLONE_VM) on a stack of its own, so
 * nothing is copied (a fork copied the loop's page tables and faulted its pages back in: a loop of
 * /bin/true took 612 us a run with fork, 587 us with this, medians of 10 rounds on these VMs). Not a vfork
 * (CLONE_VFORK), which posix_spawn is: its parent is woken at the child's execve, on the benchmark's CPU as
 * often as not, and switched the benchmark out right after it had joined the cgroup (context-switches of
 * /bin/true: mean 0.05 a run with fork, 0.23 with vfork, 0.06 with this). The loop goes on to wait for
 * the exit meanwhile and touches nothing the child reads: the child runs run() on child_stack with what
 * parse_options put in launch. */
static void __attribute__((noreturn, used)) child_main(void) {
    /* It waits as SCHED_BATCH, which never preempts at its wake-up: released, it runs once perfctl, which
     * released it on this CPU, has gone to sleep, rather than preempting perfctl and then starting the
     * benchmark beside it, where the execve's balancing moved the benchmark to the other CPU, a migration and
     * a switch counted as the benchmark's. Its scheduling comes back before anything else. */
    struct sched_param batch = {0};
    syscall3(__NR_sched_setscheduler, 0, SCHED_BATCH, (long)&batch);
    if (syscall3(__NR_read, release_fd, (long)&release_taken, 1) != 1)
        leave(EXIT_NOT_RELEASED);
    released_ns = monotonic_ns();
    long result = syscall3(__NR_sched_setscheduler, 0, loop_policy, (long)&loop_priority);
    if (result < 0)
        fail_errno(EXIT_SETUP_FAILED, "cannot restore the scheduling policy", result);
    run();
}

#define STRINGIFY(x) #x
#define TO_TEXT(x) STRINGIFY(x)
/* clone(CLONE_VM | SIGCHLD, stack): in the parent the child's pid (or -errno); the child calls ``entry`` on
 * ``stack`` and never returns. In assembly, since the child must not touch the parent's stack frame: the
 * compiler's code after a raw syscall would. */
long spawn_child(char *stack, void (*entry)(void));
__asm__(".globl spawn_child\n"
        "spawn_child:\n"
        "\tmov %rsi, %r9\n"  /* entry: syscall keeps r9 (it clobbers rcx and r11) */
        "\tmov %rdi, %rsi\n" /* the child's stack */
        "\tmov $(" TO_TEXT(CLONE_VM) "|" TO_TEXT(SIGCHLD) "), %edi\n"
        "\txor %edx, %edx\n"
        "\txor %r10d, %r10d\n"
        "\txor %r8d, %r8d\n"
        "\tmov $" TO_TEXT(__NR_clone) ", %eax\n"
        "\tsyscall\n"
        "\ttest %rax, %rax\n"
        "\tjnz 1f\n"
        "\txor %ebp, %ebp\n"
        "\tcall *%r9\n" /* the child: entry never returns */
        "\thlt\n"
        "1:\tret\n");

/* Wait for the loop's child ``pid`` to end, writing a RECORD_STOPPED record for each stop on the way (perfctl
 * decides whether a stop is final); *record gets how it ended. */
static void wait_child(long pid, struct record *record) {
    struct rusage usage; /* the kernel's waitid takes one too */
    siginfo_t info;
    for (;;) {
        long result = syscall5(__NR_waitid, P_PID, pid, (long)&info, WEXITED | WSTOPPED, (long)&usage);
        if (result == -EINTR)
            continue;
        if (result < 0)
            fail_errno(EXIT_SETUP_FAILED, "waitid failed", result);
        if (info.si_code == CLD_STOPPED || info.si_code == CLD_TRAPPED) { /* say so, wait on */
            long since = exec_ns ? exec_ns : released_ns;
            struct record stopped = {RECORD_STOPPED, pid, info.si_code, info.si_status, 0,
                                     since ? since : monotonic_ns(), monotonic_ns()};
            syscall3(__NR_write, launch.loop, (long)&stopped, sizeof stopped);
            continue;
        }
        break;
    }
    /* A child that ended before it read a release read EOF (perfctl ended the loop), or was killed while it
     * waited (a stop that never ended, a stray kill): the next release, once perfctl writes it, was that
     * child's, and gets this record, so that every release still gets exactly one. */
    char byte;
    if (!release_taken && syscall3(__NR_read, release_fd, (long)&byte, 1) != 1)
        leave(0);
    record->start_ns = released_ns ? released_ns : monotonic_ns();
    record->code = info.si_code;
    record->status = info.si_status;
    record->max_rss_kib = usage.ru_maxrss;
}

/* -L: one child per release, one record per child, until perfctl closes the release pipe (exit 0). */
static void __attribute__((noreturn)) loop(void) {
    long result;
    if ((result = syscall3(__NR_fcntl, launch.loop, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "bad record descriptor for the loop", result);
    /* the loop reads its releases from a copy of stdin, and stdin becomes /dev/null: each child has it so */
    long releases = syscall3(__NR_fcntl, 0, F_DUPFD_CLOEXEC, 3);
    if (releases < 0)
        fail_errno(EXIT_SETUP_FAILED, "cannot keep the release pipe", releases);
    long null = syscall3(__NR_open, (long)"/dev/null", O_RDONLY | O_CLOEXEC, 0);
    if (null < 0 || (result = syscall3(__NR_dup2, null, 0, 0)) < 0)
        fail(EXIT_SETUP_FAILED, "cannot open /dev/null");
    syscall3(__NR_close, null, 0, 0);
    stdin_ready = 1;
    loop_policy = syscall3(__NR_sched_getscheduler, 0, 0, 0);
    if (loop_policy < 0 || (result = syscall3(__NR_sched_getparam, 0, (long)&loop_priority, 0)) < 0)
        fail(EXIT_SETUP_FAILED, "cannot read the scheduling policy");
    release_fd = releases;
    long record_size = sizeof(struct record); /* perfctl checks it before the first run (agent/gate.py) */
    if (syscall3(__NR_write, launch.loop, (long)&record_size, sizeof record_size) != sizeof record_size)
        leave(1);
    for (;;) {
        struct record record = {RECORD_EXITED, 0, 0, 0, 0, 0, 0};
        exec_ns = 0;
        released_ns = 0;
        release_taken = 0;
        long pid = spawn_child(child_stack + sizeof child_stack, child_main);
        record.pid = pid;
        if (pid < 0) { /* as a child that could not start: perfctl reads exit 126 and this line */
            char byte;
            if (syscall3(__NR_read, releases, (long)&byte, 1) != 1)
                leave(0);
            say("perfctl-gate: clone failed\n");
            record.start_ns = monotonic_ns();
            record.code = CLD_EXITED;
            record.status = EXIT_SETUP_FAILED;
        } else {
            wait_child(pid, &record);
        }
        record.end_ns = monotonic_ns();
        if (exec_ns) /* the wall time starts at the execve, as with -T: the cgroup move is not the benchmark's */
            record.start_ns = exec_ns;
        if (syscall3(__NR_write, launch.loop, (long)&record, sizeof record) != sizeof record)
            leave(1);
    }
}

void __attribute__((noreturn, used)) gate_main(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    launch.envp = argv + argc + 1;
    parse_options(argc, argv);
    reset_signals();
    /* their pages are touched now, not by run() in the cgroup, where a fault was counted as the benchmark's */
    exec_ns = 0;
    *(volatile long *)&exec_time.tv_sec = 0;
    long result;
    if (launch.join >= 0 && (result = syscall3(__NR_fcntl, launch.join, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "bad cgroup descriptor", result);
    if (launch.timing >= 0 && (result = syscall3(__NR_fcntl, launch.timing, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(EXIT_SETUP_FAILED, "bad timing descriptor", result);
    if (launch.loop >= 0)
        loop();
    char byte;
    if (syscall3(__NR_read, 0, (long)&byte, 1) != 1)
        leave(EXIT_NOT_RELEASED);
    run();
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall gate_main\n");
