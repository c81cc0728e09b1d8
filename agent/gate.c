/* perfctl's exec gate: a static program without libc that blocks until perfctl releases it, then execs
 * the benchmark in place (same pid), so counters attached with enable_on_exec start at the benchmark's
 * own exec.
 *
 *   gate [-u UID] [-g GID] [-G GID,GID...] [-C DIR] [-J FD] -- /abs/path/to/benchmark ARGS...
 *   (stdin: the release pipe)
 *
 * It reads one byte from stdin (EOF: perfctl died before releasing; exit 125 without running anything),
 * points stdin at /dev/null, drops to the given groups, gid and uid (all three of real, effective and
 * saved), changes to DIR, and execve()s the benchmark with the environment it was given. With -J, FD is
 * a cgroup's cgroup.procs, opened by perfctl (as root): the gate marks it close-on-exec before anything
 * else and writes "0" to it (moving itself into that cgroup) as its very last step before execve, so
 * counters scoped to the cgroup (agent/perf_event.py, cgroup counting) see nothing of the gate but that
 * write's return and the first half of the execve. A failed move is a failed setup step (126): the
 * benchmark never runs outside the cgroup it is counted and contained in. The kernel checks the move
 * against the credentials of FD's opener, so it works after the drop to --user. Dropping
 * privileges here rather than in a forked Python child lets perfctl start every benchmark with
 * posix_spawn: a fork() in a process holding gRPC threads can crash the child. Exit 126: a setup step
 * failed; 127: execve failed. Either says on stderr what failed and the system's reason: the errno's name
 * and text for the usual ones ("execve failed: EACCES (Permission denied)"), else "errno N", since
 * without libc there is no strerror and a sample's stderr is all the user sees.
 */
#include <asm/unistd.h>
#include <fcntl.h>

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
    long result;
    if (join >= 0 && (result = syscall3(__NR_fcntl, join, F_SETFD, FD_CLOEXEC)) < 0)
        fail_errno(126, "bad cgroup descriptor", result);
    char byte;
    if (syscall3(__NR_read, 0, (long)&byte, 1) != 1)
        leave(125);
    long null = syscall3(__NR_open, (long)"/dev/null", O_RDONLY, 0);
    if (null > 0) {
        syscall3(__NR_dup2, null, 0, 0);
        syscall3(__NR_close, null, 0, 0);
    }
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
    result = syscall3(__NR_execve, (long)argv[i], (long)(argv + i), (long)envp);
    fail_errno(127, "execve failed", result);
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall gate_main\n");
