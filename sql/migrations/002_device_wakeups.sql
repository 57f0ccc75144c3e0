-- Version 2: when the renewal job last woke a device with a silent push (rate limit).
ALTER TABLE Devices ADD COLUMN IF NOT EXISTS last_wakeup_at DATETIME(3) NULL;
