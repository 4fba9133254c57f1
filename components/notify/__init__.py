"""notify: one message to a webhook when a run fails, is not blessed, or pushes."""
