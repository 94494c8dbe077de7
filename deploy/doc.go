// Package deploy holds the tests of the deployment recipes beside it: the
// container image (Dockerfile), the Helm chart (helm/rezuscloud) and the
// systemd units (systemd/: the server, and the three-machine layout of
// replicas on etcd). It is a module of its own so
// that Helm's dependencies stay out of the server's module. It builds
// nothing and runs no container.
package deploy
