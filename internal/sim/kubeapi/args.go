package kubeapi

import (
	"encoding/base64"
	"net"
	"strconv"
	"strings"
)

func base64std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func (o Options) url(port int, scheme string) string {
	return scheme + "://" + net.JoinHostPort(o.Address.String(), strconv.Itoa(port))
}

// etcdName is the name of the control plane's etcd member.
const etcdName = "sim"

// etcdArgs: one member on the address, plain HTTP on loopback, and no
// fsync: a simulated cluster trades durability across a machine's crash
// for speed.
func etcdArgs(o Options) []string {
	client, peer := o.url(EtcdClientPort, "http"), o.url(EtcdPeerPort, "http")
	return []string{
		"--name=" + etcdName,
		"--data-dir=" + etcdDataDir(o.Dir),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + etcdName + "=" + peer,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// apiserverArgs: the cluster CA verifies clients (and so the admin
// kubeconfig), Node and RBAC authorize, and the service-account key signs
// tokens with the API's URL as their issuer. No endpoint reconciler runs:
// the "kubernetes" Service has no endpoints to keep, since nothing in the
// simulated cloud dials it.
func apiserverArgs(o Options, f files) []string {
	return append([]string{
		"--advertise-address=" + o.Address.String(),
		"--bind-address=" + o.Address.String(),
		"--secure-port=" + strconv.Itoa(o.Port),
		"--etcd-servers=" + o.url(EtcdClientPort, "http"),
		"--tls-cert-file=" + f.servingCrt, "--tls-private-key-file=" + f.servingKey,
		"--client-ca-file=" + f.caCrt,
		"--service-account-key-file=" + f.saKey,
		"--service-account-signing-key-file=" + f.saKey,
		"--service-account-issuer=" + o.url(o.Port, "https"),
		"--service-cluster-ip-range=" + o.ServiceCIDR.String(),
		"--authorization-mode=Node,RBAC",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
	}, o.APIServerArgs...)
}

// controllerManagerArgs: one instance, so no leader election; each
// controller acts as its own service account, with the roles Kubernetes's
// bootstrap policy gives it, as on a real control plane; the cluster CA
// signs the certificates that CSRs ask for.
func controllerManagerArgs(o Options, f files) []string {
	return append([]string{
		"--kubeconfig=" + f.controllerManagerKubeconfig,
		"--authentication-kubeconfig=" + f.controllerManagerKubeconfig,
		"--authorization-kubeconfig=" + f.controllerManagerKubeconfig,
		"--bind-address=" + o.Address.String(),
		"--secure-port=" + strconv.Itoa(ControllerManagerPort),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + f.saKey,
		"--root-ca-file=" + f.caCrt,
		"--cluster-signing-cert-file=" + f.caCrt,
		"--cluster-signing-key-file=" + f.caKey,
		"--profiling=false",
	}, emulation(o)...)
}

// schedulerArgs: one instance, so no leader election.
func schedulerArgs(o Options, f files) []string {
	return append([]string{
		"--kubeconfig=" + f.schedulerKubeconfig,
		"--authentication-kubeconfig=" + f.schedulerKubeconfig,
		"--authorization-kubeconfig=" + f.schedulerKubeconfig,
		"--bind-address=" + o.Address.String(),
		"--secure-port=" + strconv.Itoa(SchedulerPort),
		"--leader-elect=false",
		"--profiling=false",
	}, emulation(o)...)
}

// emulation is the --emulated-version that the API server starts with,
// for the controller-manager and the scheduler: a 1.37 scheduler waits
// forever for the informers of APIs that an API server emulating an
// older release does not let it list.
func emulation(o Options) []string {
	for _, a := range o.APIServerArgs {
		if strings.HasPrefix(a, "--emulated-version=") {
			return []string{a}
		}
	}
	return nil
}
