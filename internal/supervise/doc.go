// Package supervise runs the server under a small first process, as a
// container's PID 1 or any process's parent: it starts the server, passes
// it the signals it gets, and, once the server has exited, waits for what
// the server left running (a tofu apply and its guard, which outlive a
// crash on purpose) before it exits with the server's code.
//
// A container ends every process in it when its first process exits, so
// a server that is PID 1 itself takes its tofu with it when it crashes or
// is OOM-killed: the apply saves no state. Under the supervisor, that
// apply gets the time to stop and save its state (a replica's guard
// interrupts it at once, see tofu.Guard), and the container restarts only
// then.
//
// It owns the process tree below it, on Linux, as a child subreaper; it
// must not know what the server does.
package supervise
