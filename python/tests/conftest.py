"""Suite-wide settings: no tuning file, so a user's own `attn tune` results never change what the
tests select (tests that tune point ATTN_TUNE_FILE at a file of their own)."""
import os

os.environ["ATTN_TUNE_FILE"] = "off"
