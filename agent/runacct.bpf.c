// SPDX-License-Identifier: GPL-2.0
/*
 * runacct: what happened to one benchmark's process tree during one run, counted in the kernel.
 *
 * Loaded once per perfctl process by agent/runacct.py (libbpf CO-RE: built at install time against a
 * vmlinux.h generated from this kernel's BTF). Per run the loader only bumps the generation in `state`
 * and puts the benchmark's pid (still blocked in the exec gate) into `tracked`; everything else is
 * done here:
 *   - counting starts at the tracked task's exec (the benchmark, not the gate) and stops when the last
 *     tracked task has exited and left its CPU for good;
 *   - forks and thread creations of tracked tasks are tracked too (sched_process_fork), so the whole
 *     tree is accounted; a child that does not fit in `tracked` is counted in RA_UNTRACKED;
 *   - interrupts that land while a tracked task is current, by class (local timer, device IRQs, IPIs,
 *     softirqs); for the scheduler tick among the timer interrupts, whether the CPU was in user mode
 *     (the count the instruction correction needs, ../shared/notes/counter-artifacts.md section 1).
 *     The tick tells it by the kernel's own decision: update_process_times(user_mode(regs)) adds the
 *     tick to the task's utime or to its stime between local_timer_entry and local_timer_exit, so the
 *     difference of the two across the interrupt is the mode. (The interrupted registers themselves,
 *     the per-CPU __irq_regs, are out of reach: a typed ksym of a per-CPU variable needs
 *     CONFIG_KALLSYMS_ALL, and fentry, which gets them as an argument, is refused on these machines.)
 *   - page faults split by the x86 exceptions tracepoints into user and kernel faults;
 *   - context switches in and out, preemptions, on-CPU and off-CPU time of the tree; a switch the
 *     kernel ran without its sched_switch event (seen on these VMs under load, by perf's and ftrace's
 *     own sched_switch events too: a task found running that was last seen leaving its CPU, or the
 *     reverse) is counted as the switch it must have been and in RA_MISSED, since the times around it
 *     are then unknown;
 *   - interference: time other tasks (not idle) ran on CPUs the benchmark had run on, and how many
 *     distinct tasks those were.
 * Only BTF tracepoints (tp_btf): this kernel has no kprobes, and they need no tracefs.
 *
 * Counters are per CPU (no atomics on hot paths) and carry the generation they belong to, so a new
 * run needs no clearing: a CPU's slots are zeroed by the first event of the new generation.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

/* Slots of `counters`; agent/runacct.py SLOTS names them in this order (and checks the count). */
enum ra_slot {
	RA_GEN,
	RA_TIMER, RA_TICK_USER, RA_TICK_KERNEL,
	RA_DEVICE,
	RA_IPI_RESCHEDULE, RA_IPI_CALL, RA_SOFTIRQ,
	RA_FAULT_USER, RA_FAULT_KERNEL,
	RA_SWITCH_OUT, RA_SWITCH_IN, RA_PREEMPT,
	RA_ON_CPU_NS, RA_OFF_CPU_NS,
	RA_OTHER_NS, RA_OTHER_TASKS,
	RA_FORKS, RA_UNTRACKED,
	RA_MISSED,
	NR_SLOTS,
};

struct ra_counters {
	__u64 v[NR_SLOTS];
};

struct ra_state {
	__u64 gen;      /* the run: bumped by the loader */
	__u64 active;   /* 1 from the tracked task's exec until the last tracked task exits */
	__u64 start_ns; /* the exec */
	__u64 end_ns;   /* the last exit */
	__s64 live;     /* tracked tasks alive */
};

struct ra_task {
	__u64 off_since; /* when the task last left a CPU (0: on a CPU, or not yet run; RA_EXITED) */
};

#define RA_EXITED (~0ULL)
#define TASK_RUNNING 0 /* linux/sched.h: macros are not in vmlinux.h */

struct ra_cpu {
	__u64 slice_start; /* when the current task got this CPU */
	__u64 used_gen;    /* the last run whose tasks ran here */
	__u64 tick_utime;  /* current's utime and stime at local_timer_entry */
	__u64 tick_stime;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ra_state);
} state SEC(".maps");

/* The loader sets max_entries (perfctl's --ebpf-max-tasks) before loading. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct ra_task);
} tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ra_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ra_cpu);
} cpus SEC(".maps");

/* Other tasks seen on the benchmark's CPUs: pid -> generation (LRU: it can never fill up). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} others SEC(".maps");

static __u32 zero;

static __always_inline struct ra_state *active_state(void)
{
	struct ra_state *st = bpf_map_lookup_elem(&state, &zero);

	return st && st->active ? st : NULL;
}

static __always_inline struct ra_counters *counters_of(__u64 gen)
{
	struct ra_counters *c = bpf_map_lookup_elem(&counters, &zero);

	if (c && c->v[RA_GEN] != gen) {
		__builtin_memset(c, 0, sizeof(*c));
		c->v[RA_GEN] = gen;
	}
	return c;
}

/* The counters of the run, when the current task is one of the benchmark's; else NULL. */
static __always_inline struct ra_counters *current_run(void)
{
	struct ra_state *st = active_state();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!st || !bpf_map_lookup_elem(&tracked, &tid))
		return NULL;
	return counters_of(st->gen);
}

static __always_inline int count(int slot)
{
	struct ra_counters *c = current_run();

	if (c)
		c->v[slot]++;
	return 0;
}

SEC("tp_btf/local_timer_entry")
int BPF_PROG(on_timer, int vector)
{
	struct ra_counters *c = current_run();
	struct ra_cpu *cpu = bpf_map_lookup_elem(&cpus, &zero);
	struct task_struct *task = bpf_get_current_task_btf();

	if (!c || !cpu)
		return 0;
	c->v[RA_TIMER]++;
	cpu->tick_utime = task->utime;
	cpu->tick_stime = task->stime;
	return 0;
}

SEC("tp_btf/local_timer_exit")
int BPF_PROG(on_timer_exit, int vector)
{
	struct ra_counters *c = current_run();
	struct ra_cpu *cpu = bpf_map_lookup_elem(&cpus, &zero);
	struct task_struct *task = bpf_get_current_task_btf();

	if (!c || !cpu)
		return 0;
	if (task->utime != cpu->tick_utime)
		c->v[RA_TICK_USER]++;
	else if (task->stime != cpu->tick_stime)
		c->v[RA_TICK_KERNEL]++;
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_device_irq, int irq, struct irqaction *action)
{
	return count(RA_DEVICE);
}

SEC("tp_btf/reschedule_entry")
int BPF_PROG(on_reschedule_ipi, int vector)
{
	return count(RA_IPI_RESCHEDULE);
}

SEC("tp_btf/call_function_entry")
int BPF_PROG(on_call_function_ipi, int vector)
{
	return count(RA_IPI_CALL);
}

SEC("tp_btf/call_function_single_entry")
int BPF_PROG(on_call_function_single_ipi, int vector)
{
	return count(RA_IPI_CALL);
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq, unsigned int vec_nr)
{
	return count(RA_SOFTIRQ);
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_fault_user, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return count(RA_FAULT_USER);
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(on_fault_kernel, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return count(RA_FAULT_KERNEL);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct ra_state *st = bpf_map_lookup_elem(&state, &zero);
	struct ra_cpu *cpu = bpf_map_lookup_elem(&cpus, &zero);
	__u32 pid = p->pid;

	if (!st || !cpu || st->active || !bpf_map_lookup_elem(&tracked, &pid))
		return 0;
	st->start_ns = bpf_ktime_get_ns();
	st->active = 1;
	cpu->used_gen = st->gen;
	counters_of(st->gen);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	struct ra_task info = {};
	struct ra_state *st = bpf_map_lookup_elem(&state, &zero);
	struct ra_counters *c;
	__u32 parent_pid = parent->pid, child_pid = child->pid;

	if (!st || !st->active || !bpf_map_lookup_elem(&tracked, &parent_pid))
		return 0;
	c = counters_of(st->gen);
	if (!c)
		return 0;
	info.off_since = bpf_ktime_get_ns(); /* runnable, not yet running: off CPU until its first switch-in */
	if (bpf_map_update_elem(&tracked, &child_pid, &info, BPF_NOEXIST)) {
		c->v[RA_UNTRACKED]++;
		return 0;
	}
	__sync_fetch_and_add(&st->live, 1);
	c->v[RA_FORKS]++;
	return 0;
}

/*
 * An exiting task stays tracked until its last switch-out (do_task_dead): exit_mm and the rest of
 * do_exit come after this tracepoint and are the benchmark's time, not another task's.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 pid = p->pid;
	struct ra_task *info = bpf_map_lookup_elem(&tracked, &pid);
	struct ra_state *st = active_state();
	struct ra_counters *c;

	if (!info)
		return 0;
	/* the exiting task is current: marked off its CPU, it got one without a reported switch */
	if (info->off_since && info->off_since != RA_EXITED && st) {
		c = counters_of(st->gen);
		if (c) {
			c->v[RA_SWITCH_IN]++;
			c->v[RA_MISSED]++;
		}
	}
	info->off_since = RA_EXITED;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct ra_state *st = active_state();
	struct ra_cpu *cpu;
	struct ra_counters *c;
	struct ra_task *info;
	__u32 prev_pid, next_pid;
	__u64 now, start, *seen;

	if (!st)
		return 0; /* between runs: slices are clipped to the next run's start, nothing to keep */
	cpu = bpf_map_lookup_elem(&cpus, &zero);
	c = counters_of(st->gen);
	if (!cpu || !c)
		return 0;
	now = bpf_ktime_get_ns();
	start = cpu->slice_start > st->start_ns ? cpu->slice_start : st->start_ns;
	prev_pid = prev->pid;
	next_pid = next->pid;

	info = bpf_map_lookup_elem(&tracked, &prev_pid);
	if (info) {
		c->v[RA_ON_CPU_NS] += now - start;
		if (info->off_since == RA_EXITED) {
			bpf_map_delete_elem(&tracked, &prev_pid);
			if (__sync_fetch_and_add(&st->live, -1) == 1) {
				st->end_ns = now;
				st->active = 0;
			}
		} else {
			if (info->off_since) { /* leaving a CPU it was never seen to get: that switch went unreported */
				c->v[RA_SWITCH_IN]++;
				c->v[RA_MISSED]++;
			}
			c->v[RA_SWITCH_OUT]++;
			/* still runnable when switched out: the scheduler took the CPU (involuntary) */
			if (preempt || prev->__state == TASK_RUNNING)
				c->v[RA_PREEMPT]++;
			info->off_since = now;
		}
	} else if (prev_pid != 0 && cpu->used_gen == st->gen) {
		c->v[RA_OTHER_NS] += now - start;
		seen = bpf_map_lookup_elem(&others, &prev_pid);
		if (!seen || *seen != st->gen) {
			bpf_map_update_elem(&others, &prev_pid, &st->gen, BPF_ANY);
			c->v[RA_OTHER_TASKS]++;
		}
	}

	info = bpf_map_lookup_elem(&tracked, &next_pid);
	if (info) {
		c->v[RA_SWITCH_IN]++;
		if (!info->off_since) { /* getting a CPU it was never seen to leave (from the exec on it is seen) */
			c->v[RA_SWITCH_OUT]++;
			c->v[RA_MISSED]++;
		}
		if (info->off_since)
			c->v[RA_OFF_CPU_NS] += now - (info->off_since > st->start_ns ? info->off_since : st->start_ns);
		info->off_since = 0;
		cpu->used_gen = st->gen;
	}
	cpu->slice_start = now;
	return 0;
}
