package tofu

import "syscall"

// interruptOnDeath makes the kernel send tofu SIGINT when the server
// dies (see Options.InterruptOnDeath).
func interruptOnDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }
