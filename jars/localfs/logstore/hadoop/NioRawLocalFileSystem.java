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
 * Hadoop's raw local file system, making in-process the system calls Hadoop's makes through child
 * processes when its native library is not loaded.
 *
 * <p>Without {@code libhadoop} (a pip-installed pyspark has none), {@link RawLocalFileSystem} sets the
 * permission of every file and directory it creates by running {@code chmod}, and finds out whether a
 * path is a symbolic link by running {@code readlink} (twice a rename): a fork of the driver's JVM
 * each, tens of milliseconds. A streaming query writes four files a micro-batch (its offset log and
 * commit log entries and their checksums) and renames two. This class makes the same {@code chmod(2)}
 * and {@code lstat(2)} calls in-process. Only the nine rwx bits are set, not the sticky bit (nothing
 * that writes a local table or checkpoint asks for it).
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
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), PosixFilePermissions.fromString(rwx));
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission); // a file system without POSIX permissions: Hadoop's way
    }
  }

  /**
   * A path's status without following a final symbolic link. A path that is no symbolic link (checked
   * in-process) has the status {@link #getFileStatus} gives, which is Hadoop's answer for it too; a
   * symbolic link gets Hadoop's answer.
   */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (NativeIO.isAvailable() || Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
