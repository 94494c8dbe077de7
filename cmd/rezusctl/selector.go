package main

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/internal/labels"
)

// checkSelector parses a -l selector with the server's own parser, so
// that a mistake is reported, in the server's words, before any request.
func checkSelector(s string) error {
	if _, err := labels.Parse(s); err != nil {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("labelSelector: %v", err)}
	}
	return nil
}
