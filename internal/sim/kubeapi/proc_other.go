//go:build !linux

package kubeapi

import "syscall"

// sysProcAttr puts a process in a group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
