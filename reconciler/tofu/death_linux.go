package tofu

import "syscall"

// interruptOnDeath makes the kernel send tofu SIGINT when the server
// dies (see Options.InterruptOnDeath).
func interruptOnDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }

// killOnDeath makes the kernel kill tofu when the guard that runs it
// dies: a guard killed (the server's wait for an interrupted tofu is
// over) ends its tofu, as the server's kill ended tofu without a guard.
func killOnDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
