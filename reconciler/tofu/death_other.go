//go:build unix && !linux

package tofu

import "syscall"

// interruptOnDeath does nothing where the kernel has no parent-death
// signal: tofu runs on to its end (see Options.InterruptOnDeath).
func interruptOnDeath(*syscall.SysProcAttr) {}

// killOnDeath does nothing where the kernel has no parent-death signal.
func killOnDeath(*syscall.SysProcAttr) {}
