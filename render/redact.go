package render

import (
	"encoding/json"
	"fmt"
)

// Redacted stands in for secret values in workspaces shown to people.
const Redacted = "(sensitive)"

// Redact returns a rendered main.tf.json with its secrets replaced by
// Redacted: the Talos secrets bundle and every machine's user data, as a
// user_data attribute or a metadata entry of that name (it carries cluster
// keys). What is left shows the shape of the workspace:
// resources, counts, names, shapes and the backend, so that two workspaces
// can be compared without revealing anything.
func Redact(mainTF []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(mainTF, &doc); err != nil {
		return nil, fmt.Errorf("redact workspace: %w", err)
	}
	if vars, ok := doc["variable"].(map[string]any); ok {
		if v, ok := vars[SecretsVariable].(map[string]any); ok {
			v["default"] = Redacted
		}
	}
	if res, ok := doc["resource"].(map[string]any); ok {
		for _, byName := range res {
			names, ok := byName.(map[string]any)
			if !ok {
				continue
			}
			for _, body := range names {
				b, ok := body.(map[string]any)
				if !ok {
					continue
				}
				if _, has := b["user_data"]; has {
					b["user_data"] = Redacted
				}
				if md, ok := b["metadata"].(map[string]any); ok {
					if _, has := md["user_data"]; has {
						md["user_data"] = Redacted
					}
				}
			}
		}
	}
	return marshal(doc)
}
