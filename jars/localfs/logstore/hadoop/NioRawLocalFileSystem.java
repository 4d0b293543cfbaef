package logstore.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's raw local file system, setting permissions through {@code java.nio} when Hadoop's native
 * library is not loaded.
 *
 * <p>Without {@code libhadoop} (a pip-installed pyspark has none), {@link RawLocalFileSystem} sets the
 * permission of every file and directory it creates by running {@code chmod} in a child process: a fork
 * of the driver's JVM, tens of milliseconds each. A streaming query writes four such files a micro-batch
 * (its offset log and commit log entries and their checksums). This class makes the same
 * {@code chmod(2)} call in-process, and finds out whether a path is a symbolic link in-process
 * too (Hadoop runs {@code readlink} for that, twice a rename). Only the nine rwx bits are set; the sticky bit is not (nothing that
 * writes a local table or checkpoint asks for it).
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (NativeIO.isAvailable()) {
      super.setPermission(p, permission);
      return;
    }
    String rwx =
        permission.getUserAction().SYMBOL
            + permission.getGroupAction().SYMBOL
            + permission.getOtherAction().SYMBOL;
    Files.setPosixFilePermissions(pathToFile(p).toPath(), PosixFilePermissions.fromString(rwx));
  }

  /**
   * A path's status without following a final symbolic link. Hadoop's answers this by running {@code
   * readlink} in a child process for every path (each rename asks it of both its paths); a path that is
   * no symbolic link (checked in-process) has the status {@link #getFileStatus} gives, which is what
   * Hadoop answers for it too.
   */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (NativeIO.isAvailable() || Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
