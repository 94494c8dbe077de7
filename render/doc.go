// Package render turns the desired state of one tenant into a deterministic
// OpenTofu workspace (main.tf.json, and the Talos machine configs and
// secrets bundle as values of its sensitive variables), through provider
// modules that know how each providerClass becomes TF resources and how TF
// types map back to resource kinds.
//
// The same desired state and the same projected state always give
// byte-identical files. It must not import reconciler or backend.
package render
