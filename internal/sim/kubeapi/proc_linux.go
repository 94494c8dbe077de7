package kubeapi

import "syscall"

// sysProcAttr puts a process in a group of its own, and has the kernel
// kill it when the server that started it dies, so that a crashed server
// leaves no control plane behind; a restarted one starts it again over the
// same directory.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
