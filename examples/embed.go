// Package examples embeds the example repository of manifests, so that
// `rezuscloud demo` can lay it out on a machine that has only the binary.
package examples

import "embed"

// FS holds the example manifests and their README, as they sit in this
// directory.
//
//go:embed README.md production staging
var FS embed.FS
