// Package backend owns the server's durable side: the bbolt store, the
// Terraform HTTP state backend, authentication by tokens and the read-only
// API. It must not import reconciler or render; where the API has to set
// something in motion it calls a small interface declared here.
package backend
