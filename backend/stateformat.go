package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// stateHead is what the backend reads of a TF state: the top-level members
// that tell a state from other bytes and that the guards compare. Go's
// encoding/json matches keys as tofu and terraform do (the last of
// duplicate keys wins, case-insensitively), so the backend reads the same
// serial and lineage as they will.
type stateHead struct {
	Version           json.RawMessage `json:"version"`
	Serial            json.RawMessage `json:"serial"`
	Lineage           json.RawMessage `json:"lineage"`
	EncryptionVersion json.RawMessage `json:"encryption_version"`
	EncryptedData     json.RawMessage `json:"encrypted_data"`
}

// parseState checks that body is a TF state the backend may store and
// returns its serial and lineage. Two shapes are accepted:
//
//   - a plain state (tofu or terraform): a JSON object with an integer
//     version, an integer serial of 0 or more and a non-empty lineage;
//   - OpenTofu's encrypted state: a JSON object with a non-empty
//     encryption_version, encrypted_data as a string, and serial and
//     lineage in clear text as above.
//
// The whole body must be valid JSON. The error says what is wrong.
func parseState(body []byte) (serial uint64, lineage string, err error) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		if !json.Valid(body) {
			return 0, "", errors.New("the body is not JSON")
		}
		return 0, "", errors.New("the body is JSON but not an object")
	}
	var h stateHead
	if err := json.Unmarshal(body, &h); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return 0, "", fmt.Errorf("the body is not valid JSON at byte %d: %v", se.Offset, se)
		}
		return 0, "", fmt.Errorf("the body is not a JSON object: %v", err)
	}
	encrypted := len(h.EncryptionVersion) > 0 && string(h.EncryptionVersion) != "null"
	if encrypted {
		var v, data string
		if json.Unmarshal(h.EncryptionVersion, &v) != nil || v == "" {
			return 0, "", errors.New("encryption_version must be a non-empty string")
		}
		if json.Unmarshal(h.EncryptedData, &data) != nil {
			return 0, "", errors.New("an encrypted state needs encrypted_data as a string")
		}
	} else if _, err := wholeNumber(h.Version, "version"); err != nil {
		return 0, "", err
	}
	if serial, err = wholeNumber(h.Serial, "serial"); err != nil {
		return 0, "", err
	}
	if json.Unmarshal(h.Lineage, &lineage) != nil || lineage == "" {
		return 0, "", errors.New("lineage must be a non-empty string")
	}
	return serial, lineage, nil
}

// wholeNumber reads a JSON integer of 0 or more.
func wholeNumber(raw json.RawMessage, what string) (uint64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fmt.Errorf("it has no %s", what)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s is not a whole number", what, raw)
	}
	return n, nil
}
