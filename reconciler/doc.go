// Package reconciler runs the loop that turns a snapshot of the repository
// into applied infrastructure: load, validate, render, diff, apply, project,
// and then, through the Talos plane (package reconciler/talos), bootstrap
// and roll changes through the machines (plane.go). It owns the apply
// queue, the projection of TF state into resources and the per-commit
// status reports; tofu runs through package reconciler/tofu.
package reconciler
