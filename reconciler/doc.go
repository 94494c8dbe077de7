// Package reconciler runs the loop that turns a snapshot of the repository
// into applied infrastructure: load, validate, render, diff, apply, project.
// It owns the apply queue, the tofu runner, the projection of TF state into
// resources and the per-commit status reports.
package reconciler
