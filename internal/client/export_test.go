package client

// SetPageSize makes List ask for pages of n items, so that tests can page
// through a few objects.
func (c *Client) SetPageSize(n int) { c.page = n }
